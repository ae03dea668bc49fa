-- The running jobs, found without reading the pending ones: an idle worker looks for a running
-- job to split (`queue.SPLIT`) whenever it finds nothing to claim, and the reaper looks for
-- expired leases, while millions of jobs may be pending. On `id` alone, not `locked_until`:
-- heartbeats change `locked_until` and `cursor`, and an index on either would take their
-- updates off the heap-only (HOT) path.
CREATE INDEX jobs_running_idx ON jobs (id) WHERE status = 'running';
