"""The job kinds and their planning: what a runner is given of its worker (`job_context`), one
runner per kind (`index_blocks`, `decode_logs`, `index_traces`, and `partitions` for a
partition's indexes), the planner that makes block-range jobs, and the reaper that takes back
expired leases. Adding a job kind is a module here and a line in `operations.worker.RUNNERS`.
"""
