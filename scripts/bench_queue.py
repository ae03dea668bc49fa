#!/usr/bin/env python3
"""Queue benchmark: how fast no-op jobs go through the `jobs` table, against the article's
weaker claims, with many workers, a big history and a bloated table.

Every run: a fresh database (migrated template), `--jobs` no-op jobs enqueued by
`queue.enqueue`, then W worker processes (forked; one connection each, with the session
settings of `indexer work`) that start together and loop claim -> complete until no job is
pending. Throughput is jobs over the wall time from the start to the last worker's finish;
claim latency is the time of each claim statement, as a worker sees it. After each run the
database is checked: every job archived exactly once in `jobs_history`, and (but for attempt 1)
no job claimed twice.

Methods (`--methods`):
  skip-locked       the project's claim (`queue.CLAIM`) then `queue.complete`: two commits a job
  skip-locked-next  `queue.complete_and_claim`: finish a job and claim the next in one statement,
                    as `indexer work` does (its latency figures include the completion)
  batch-10          `queue.claim` LIMIT 10, then `queue.complete_many` for the ten
  batch-10-next     `queue.complete_and_claim` with ten finished and ten claimed per statement
  skip-locked-sync  `skip-locked` with synchronous_commit=on (every commit waits for its WAL flush)
  for-update        the article's attempt 2: in one transaction, SELECT the first pending id FOR
                    UPDATE (no SKIP LOCKED), then UPDATE it by id
  for-update-sync   `for-update` with synchronous_commit=on
  for-update-1stmt  the project's one-statement claim with plain FOR UPDATE instead of SKIP LOCKED
  read-then-update  the article's attempt 1: `for-update` without FOR UPDATE; jobs run twice are
                    counted
  article           the reference of issue 7, measured in the same run: the article's SKIP LOCKED
                    claim and its completing UPDATE (status 'done', the row stays in `jobs`) in
                    plain psycopg with the server's settings (durable commits): two commits a job
  article-batch-10  the same with claims of 10 and one completing UPDATE for the ten

Then, at `--scenario-workers` workers with `skip-locked`, claim latency:
  - with `--history` rows in jobs_history against an empty history;
  - after `--dead` dead tuples in `jobs` (inserted ahead of the real jobs in claim order, then
    deleted, autovacuum off for the table) against none;
and one lifecycle run (claim, `--heartbeats` heartbeats, complete) for the share of heartbeat
updates that are HOT (`pg_stat_user_tables.n_tup_hot_upd`) and the WAL bytes per job from
enqueue to archive.

Prints Markdown tables and, with --plot, draws jobs/s against workers to a PNG.

With `--latency 0,0.5,2,10` it measures instead the queue as workers on other machines see it:
each worker connects through a loopback TCP proxy (indexer/testing/latency_proxy.py) that adds
that round trip, in milliseconds, to every exchange with PostgreSQL (0: through the proxy with
no delay, the baseline). For each delay, method (`--methods`, by default `skip-locked-next` and
`batch-10-next`: single claims and batches of ten, as `indexer work` claims) and worker count,
each worker gets `--claims-per-worker` claims' worth of jobs; jobs/s and claim latency as above.
The round trip of `SELECT 1` is measured directly and through each proxy, to show what the
proxy adds.

    .venv/bin/python scripts/bench_queue.py [--jobs 20000] [--workers 1,2,4,8,16] [--repeat 3]
    .venv/bin/python scripts/bench_queue.py --latency 0,0.5,2,10 [--workers 1,2,4,8,16,32,64]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from indexer.base import db
from indexer.base.db import worker_session_options
from indexer.jobqueue import queue
from indexer.testing.latency_proxy import MAX_RTT_MS, LatencyProxy

LEASE = 300.0
KIND = "noop"

# The article's attempt 1: read, then take by id, in one transaction. Between the two statements
# another worker can take the same job; the UPDATE does not look at the status again, so both
# run it.
READ_PENDING = """
SELECT id FROM jobs WHERE status = 'pending' AND run_at <= now() ORDER BY run_at, id LIMIT 1
"""
# The article's attempt 2: the same with the first pending row locked. Every claimer queues behind
# that lock until the holder commits, then looks again.
READ_PENDING_FOR_UPDATE = READ_PENDING + "FOR UPDATE"
# The project's claim statement without SKIP LOCKED: the lock is held for one statement only.
CLAIM_FOR_UPDATE = queue.CLAIM.replace("FOR UPDATE SKIP LOCKED", "FOR UPDATE")
assert CLAIM_FOR_UPDATE != queue.CLAIM
TAKE_BY_ID = """
UPDATE jobs
SET status = 'running', attempts = attempts + 1, locked_by = %(worker)s, claim_token = gen_random_uuid(),
    locked_until = now() + make_interval(secs => %(lease)s), updated_at = now()
WHERE id = %(id)s
RETURNING id, kind, payload, attempts, claim_token, locked_until, cursor
"""

ANY_PENDING = "SELECT EXISTS (SELECT 1 FROM jobs WHERE status = 'pending')"

# For the scenarios: a big history, and dead tuples ahead of the live jobs in the claim index.
FILL_HISTORY = """
INSERT INTO jobs_history (id, kind, payload, status, attempts, locked_by, created_at, finished_at)
SELECT -n, 'noop', jsonb_build_object('n', n), 'done', 1, 'bench', now() - interval '1 hour', now() - interval '1 minute'
FROM generate_series(1, %(rows)s) AS n
"""
AUTOVACUUM_OFF = "ALTER TABLE jobs SET (autovacuum_enabled = off)"
FILL_DEAD = """
INSERT INTO jobs (kind, payload, run_at)
SELECT 'noop', '{}', now() - interval '1 day' FROM generate_series(1, %(rows)s)
"""
DELETE_ALL_JOBS = "DELETE FROM jobs"
TABLE_STATS = """
SELECT n_tup_upd, n_tup_hot_upd, n_dead_tup FROM pg_stat_user_tables WHERE relname = 'jobs'
"""
WAL_LSN = "SELECT pg_current_wal_insert_lsn()"
WAL_BYTES_SINCE = "SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), %(lsn)s)::bigint"
HISTORY_CHECK = "SELECT count(*), count(DISTINCT id) FROM jobs_history WHERE id > 0"
LIVE_JOBS = "SELECT count(*) FROM jobs"

# The article's queue, as the reference figures of issue 7 ran it: finished jobs stay in `jobs`.
ARTICLE_CLAIM = """
UPDATE jobs
SET status = 'running', attempts = attempts + 1, locked_by = %(worker)s, claim_token = gen_random_uuid(),
    locked_until = now() + make_interval(secs => %(lease)s), updated_at = now()
WHERE id IN (
    SELECT id FROM jobs WHERE status = 'pending' AND run_at <= now()
    ORDER BY run_at, id LIMIT %(limit)s FOR UPDATE SKIP LOCKED
)
RETURNING id, kind, payload, attempts, claim_token, locked_until, cursor
"""
ARTICLE_COMPLETE = """
UPDATE jobs SET status = 'done', claim_token = NULL, locked_until = NULL, updated_at = now()
WHERE id = ANY(%(ids)s) AND claim_token = ANY(%(tokens)s) AND status = 'running'
"""
ARTICLE_CHECK = "SELECT count(*) FILTER (WHERE status = 'done'), count(*) FROM jobs"

METHODS = ("skip-locked", "skip-locked-next", "batch-10", "batch-10-next", "for-update", "for-update-1stmt",
           "read-then-update", "skip-locked-sync", "for-update-sync", "article", "article-batch-10")


@dataclass
class Result:
    method: str
    workers: int
    jobs_per_second: float
    claim_p50_ms: float
    claim_p99_ms: float
    claims: int
    runs: int  # jobs started; more than the jobs when some ran twice
    heartbeats: int = 0


def connect(url: str, method: str) -> psycopg.Connection:
    if method.startswith("article"):
        return psycopg.connect(url, autocommit=True)
    options = worker_session_options(LEASE)
    if method.endswith("-sync"):
        options = options.replace("synchronous_commit=off", "synchronous_commit=on")
    return psycopg.connect(url, autocommit=True, options=options)


def work(url: str, method: str, name: str, heartbeats: int, start: mp.Barrier, out: mp.connection.Connection) -> None:
    """One worker process: claim and complete until no job is pending; sends back what it saw."""
    latencies: list[float] = []
    ran: list[int] = []
    beats = 0
    with connect(url, method) as conn:
        limit = 10 if "batch-10" in method else 1
        combined = method.endswith("-next")
        start.wait()
        held: list[queue.Claim] = []
        while True:
            t = time.perf_counter()
            if combined and held:
                _, claims = queue.complete_and_claim(conn, held, name, lease_seconds=LEASE, limit=limit)
            elif method.startswith("article"):
                claims = [queue.Claim(*r) for r in conn.execute(ARTICLE_CLAIM, {"worker": name, "lease": LEASE, "limit": limit})]
            elif method == "for-update-1stmt":
                claims = [queue.Claim(*r) for r in conn.execute(CLAIM_FOR_UPDATE, {"worker": name, "lease": LEASE, "limit": 1})]
            elif method in ("for-update", "for-update-sync", "read-then-update"):
                with conn.transaction():
                    row = conn.execute(READ_PENDING if method == "read-then-update" else READ_PENDING_FOR_UPDATE).fetchone()
                    taken = row and conn.execute(TAKE_BY_ID, {"worker": name, "lease": LEASE, "id": row[0]}).fetchone()
                claims = [queue.Claim(*taken)] if taken else []
            else:
                claims = queue.claim(conn, name, lease_seconds=LEASE, limit=limit)
            latencies.append(time.perf_counter() - t)
            held = claims
            if not claims:
                if conn.execute(ANY_PENDING).fetchone()[0]:
                    continue
                break
            ran.extend(c.id for c in claims)
            for job in claims:
                for _ in range(heartbeats):
                    queue.heartbeat(conn, job, lease_seconds=LEASE, cursor=beats)
                    beats += 1
            if method.startswith("article"):
                conn.execute(ARTICLE_COMPLETE, {"ids": [c.id for c in claims], "tokens": [c.token for c in claims]})
            elif not combined:
                if limit == 1:
                    queue.complete(conn, claims[0])
                else:
                    queue.complete_many(conn, claims)
    out.send((latencies, ran, beats, time.perf_counter()))


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class Bench:
    def __init__(self, admin_url: str, jobs: int) -> None:
        self.admin_url = admin_url
        self.jobs = jobs
        self.template = f"bench_queue_{os.getpid()}_template"
        self.run_db = f"bench_queue_{os.getpid()}_run"
        with psycopg.connect(admin_url, autocommit=True) as admin:
            for name in (self.run_db, self.template):
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            admin.execute(f'CREATE DATABASE "{self.template}"')
        with db.connect(make_conninfo(admin_url, dbname=self.template)) as conn:
            db.migrate(conn)

    def fresh(self) -> str:
        with psycopg.connect(self.admin_url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{self.run_db}" WITH (FORCE)')
            admin.execute(f'CREATE DATABASE "{self.run_db}" TEMPLATE "{self.template}"')
        return make_conninfo(self.admin_url, dbname=self.run_db)

    def close(self) -> None:
        with psycopg.connect(self.admin_url, autocommit=True) as admin:
            for name in (self.run_db, self.template):
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def run(self, url: str, method: str, workers: int, heartbeats: int = 0, *, jobs: int | None = None,
            worker_url: str | None = None) -> Result:
        """`jobs` no-op jobs (default: the bench's) through `workers` workers connecting to
        `worker_url` (default: `url`, which sets up and checks)."""
        jobs = jobs or self.jobs
        with db.connect(url) as conn:
            queue.enqueue(conn, KIND, ({"n": i} for i in range(jobs)))
            conn.execute("ANALYZE jobs")  # no VACUUM: the bloat scenario keeps its dead tuples
        ctx = mp.get_context("fork")
        start = ctx.Barrier(workers + 1)
        pipes, procs = [], []
        for w in range(workers):
            receive, send = ctx.Pipe(duplex=False)
            p = ctx.Process(target=work, args=(worker_url or url, method, f"bench-{w}", heartbeats, start, send))
            p.start()
            pipes.append(receive)
            procs.append(p)
        start.wait()
        began = time.perf_counter()
        answers = [r.recv() for r in pipes]
        for p in procs:
            p.join()
            if p.exitcode != 0:
                raise SystemExit(f"a {method} worker exited with {p.exitcode}")
        elapsed = max(a[3] for a in answers) - began
        latencies = [x for a in answers for x in a[0]]
        ran = [i for a in answers for i in a[1]]
        with db.connect(url) as conn:
            if method.startswith("article"):  # done jobs stay in `jobs`
                archived, total = conn.execute(ARTICLE_CHECK).fetchone()
                distinct, left = archived, total - archived
            else:
                archived, distinct = conn.execute(HISTORY_CHECK).fetchone()
                left = conn.execute(LIVE_JOBS).fetchone()[0]
        # Every job done and archived once; only attempt 1 may start a job twice.
        assert (archived, distinct, left) == (jobs, jobs, 0), (method, archived, distinct, left)
        assert len(set(ran)) == jobs, (method, len(set(ran)))
        if method != "read-then-update":
            assert len(ran) == jobs, (method, len(ran))
        return Result(method, workers, jobs / elapsed, 1000 * percentile(latencies, 0.5),
                      1000 * percentile(latencies, 0.99), len(latencies), len(ran), sum(a[2] for a in answers))


def median_result(results: list[Result]) -> Result:
    """The run of median throughput, with the median latencies of all runs."""
    mid = sorted(results, key=lambda r: r.jobs_per_second)[len(results) // 2]
    return Result(mid.method, mid.workers, mid.jobs_per_second,
                  statistics.median(r.claim_p50_ms for r in results), statistics.median(r.claim_p99_ms for r in results),
                  mid.claims, max(r.runs for r in results), mid.heartbeats)


def table_stats(url: str) -> tuple[int, int, int]:
    time.sleep(1.0)  # the workers' backends report their counters as they exit
    with db.connect(url) as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        return conn.execute(TABLE_STATS).fetchone()


def scenarios(bench: Bench, workers: int, history_rows: int, dead_rows: int, heartbeats: int, repeat: int) -> list[str]:
    lines = ["| table | dead tuples in `jobs` at the start | claim p50 (ms) | claim p99 (ms) | jobs/s |",
             "|---|---:|---:|---:|---:|"]

    def measured(label: str, prepare) -> Result:  # type: ignore[no-untyped-def]
        results, dead = [], []
        for _ in range(repeat):
            url = bench.fresh()
            with db.connect(url) as conn:
                prepare(conn)
            dead.append(table_stats(url)[2])
            results.append(bench.run(url, "skip-locked", workers))
        r = median_result(results)
        lines.append(f"| {label} | {statistics.median(dead):,.0f} | {r.claim_p50_ms:.2f} | {r.claim_p99_ms:.2f} "
                     f"| {r.jobs_per_second:,.0f} |")
        print(f"# {label}: p99 {r.claim_p99_ms:.2f} ms, {r.jobs_per_second:,.0f} jobs/s", file=sys.stderr, flush=True)
        return r

    def with_history(conn: psycopg.Connection) -> None:
        conn.execute(FILL_HISTORY, {"rows": history_rows})
        conn.execute("VACUUM ANALYZE jobs_history")

    def with_dead_tuples(conn: psycopg.Connection) -> None:
        conn.execute(AUTOVACUUM_OFF)
        conn.execute(FILL_DEAD, {"rows": dead_rows})
        conn.execute(DELETE_ALL_JOBS)

    measured("empty history, no dead tuples", lambda conn: None)
    measured(f"{history_rows:,} rows in jobs_history", with_history)
    measured(f"{dead_rows:,} dead tuples in jobs, autovacuum off", with_dead_tuples)

    # Two lifecycles, without and with heartbeats: which updates are HOT, and WAL per job from
    # enqueue to archive. Claims change `status`, in the claim index's predicate, so they can
    # never be HOT; the first run shows it, and the difference between the two is the heartbeats.
    lines += ["", "| lifecycle | jobs | updates of `jobs` | of them HOT | WAL bytes per job, enqueue to archive | jobs/s |",
              "|---|---:|---:|---:|---:|---:|"]
    hot_updates = []
    for beats in (0, heartbeats):
        url = bench.fresh()
        upd0, hot0, _ = table_stats(url)
        with db.connect(url) as conn:
            lsn = conn.execute(WAL_LSN).fetchone()[0]
        r = bench.run(url, "skip-locked", workers, heartbeats=beats)
        with db.connect(url) as conn:
            wal = conn.execute(WAL_BYTES_SINCE, {"lsn": lsn}).fetchone()[0]
        upd, hot, _ = table_stats(url)
        assert upd - upd0 == r.runs + r.heartbeats, (upd - upd0, r.runs, r.heartbeats)
        hot_updates.append(hot - hot0)
        lines.append(f"| claim, {beats} heartbeats, complete | {r.runs:,} | {upd - upd0:,} | {hot - hot0:,} "
                     f"| {wal / r.runs:,.0f} | {r.jobs_per_second:,.0f} |")
    share = (hot_updates[1] - hot_updates[0]) / (bench.jobs * heartbeats)
    lines += ["", f"Heartbeats that were HOT: {100 * share:.2f}%"]
    return lines


PING = "SELECT 1"


def round_trip_ms(url: str, times: int = 200) -> float:
    """The median time of `SELECT 1`, prepared, as a worker's session sees it."""
    with connect(url, "skip-locked") as conn:
        spent = []
        for _ in range(times):
            t = time.perf_counter()
            conn.execute(PING, prepare=True)
            spent.append(time.perf_counter() - t)
    return 1000 * statistics.median(spent)


def through(url: str, proxy: LatencyProxy) -> str:
    return make_conninfo(url, host="127.0.0.1", port=str(proxy.port))


def latency_runs(bench: Bench, delays: list[float], methods: list[str], workers: list[int],
                 claims_per_worker: int) -> list[str]:
    """Jobs/s and claim latency through a proxy adding each round trip: the Markdown table."""
    target = conninfo_to_dict(bench.admin_url)
    direct = round_trip_ms(bench.admin_url)
    rows = []
    for delay in delays:
        with LatencyProxy(target.get("host", "127.0.0.1"), int(target.get("port", 5432)), rtt_ms=delay) as proxy:
            measured = round_trip_ms(through(bench.admin_url, proxy))
            for method in methods:
                limit = 10 if "batch-10" in method else 1
                for n in workers:
                    url = bench.fresh()
                    r = bench.run(url, method, n, jobs=n * limit * claims_per_worker, worker_url=through(url, proxy))
                    rows.append((delay, measured, r))
                    print(f"# +{delay:g} ms ({measured:.2f} ms measured) {method} x{n}: {r.jobs_per_second:,.0f} jobs/s, "
                          f"claim p50 {r.claim_p50_ms:.2f} ms p99 {r.claim_p99_ms:.2f} ms", file=sys.stderr, flush=True)
    lines = [f"{claims_per_worker} claims per worker per run; `SELECT 1` round trip direct: {direct:.2f} ms", "",
             "| method | round trip added (ms) | `SELECT 1` through the proxy (ms) | workers | jobs/s "
             "| claim p50 (ms) | claim p99 (ms) |", "|---|---:|---:|---:|---:|---:|---:|"]
    for delay, measured, r in sorted(rows, key=lambda x: (methods.index(x[2].method), x[0], x[2].workers)):
        lines.append(f"| {r.method} | {delay:g} | {measured:.2f} | {r.workers} | {r.jobs_per_second:,.0f} "
                     f"| {r.claim_p50_ms:.2f} | {r.claim_p99_ms:.2f} |")
    lines += ["", "| method | round trip added (ms) | most jobs/s | at workers | jobs/s of 1 worker |",
              "|---|---:|---:|---:|---:|"]
    for method in methods:
        for delay in delays:
            mine = [r for d, _, r in rows if d == delay and r.method == method]
            best = max(mine, key=lambda r: r.jobs_per_second)
            one = next((r.jobs_per_second for r in mine if r.workers == 1), float("nan"))
            lines.append(f"| {method} | {delay:g} | {best.jobs_per_second:,.0f} | {best.workers} | {one:,.0f} |")
    return lines


def against_the_article(results: list[Result], workers: int) -> list[str]:
    """Each method's throughput over the article's queue of the same claim size, same run."""
    at = {r.method: r.jobs_per_second for r in results if r.workers == workers}
    lines = []
    for reference, ours in (("article", ("skip-locked", "skip-locked-next", "skip-locked-sync")),
                            ("article-batch-10", ("batch-10", "batch-10-next"))):
        if reference in at:
            lines += [f"- `{m}` at {workers} workers: {at[m]:,.0f} jobs/s, {at[m] / at[reference]:.2f}x `{reference}` "
                      f"({at[reference]:,.0f} jobs/s)" for m in ours if m in at]
    return ["", *lines] if lines else []


def plot(results: list[Result], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5))
    counts = sorted({r.workers for r in results})
    for method in dict.fromkeys(r.method for r in results):
        mine = sorted((r for r in results if r.method == method), key=lambda r: r.workers)
        left.plot([r.workers for r in mine], [r.jobs_per_second for r in mine], marker="o", label=method)
        right.plot([r.workers for r in mine], [r.claim_p99_ms for r in mine], marker="o", label=method)
    for ax, label in ((left, "no-op jobs per second"), (right, "claim latency p99 (ms)")):
        ax.set_xscale("log", base=2)
        ax.set_xticks(counts, [str(w) for w in counts])
        ax.set_yscale("log")
        ax.set_xlabel("worker processes (one connection each)")
        ax.set_ylabel(label)
        ax.grid(True, which="both", alpha=0.3)
    left.set_title("throughput")
    right.set_title("claim latency, p99")
    right.legend(loc="center left", bbox_to_anchor=(1.02, 0.5))
    fig.suptitle("the jobs table on 2 cores, PostgreSQL 15: 20,000 no-op jobs per run")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=20_000, help="no-op jobs per run")
    ap.add_argument("--workers", default="1,2,4,8,16", help="comma-separated worker counts")
    ap.add_argument("--methods", default=",".join(METHODS), help="comma-separated, from: " + ", ".join(METHODS))
    ap.add_argument("--scenario-workers", type=int, default=8,
                    help="workers of the scenario runs, and the point measured --repeat times")
    ap.add_argument("--repeat", type=int, default=3, help="runs at --scenario-workers and per scenario; the median is reported")
    ap.add_argument("--repeat-others", type=int, default=1, help="runs at the other worker counts")
    ap.add_argument("--history", type=int, default=1_000_000, help="history rows for the history scenario")
    ap.add_argument("--dead", type=int, default=500_000, help="dead tuples for the bloat scenario")
    ap.add_argument("--heartbeats", type=int, default=5, help="heartbeats per job in the lifecycle run")
    ap.add_argument("--no-scenarios", action="store_true")
    ap.add_argument("--plot", type=Path, help="write a PNG of jobs/s against workers here")
    ap.add_argument("--latency", metavar="MS,MS,...",
                    help=f"instead, workers through a loopback proxy adding each round trip (0 to {MAX_RTT_MS:g} ms; "
                    "0: the proxy alone)")
    ap.add_argument("--claims-per-worker", type=int, default=200,
                    help="with --latency: claims each worker makes per run (jobs: workers x claims x claim size)")
    ap.add_argument("--database-url", default=os.environ.get("INDEXER_BENCH_DATABASE_URL",
                                                             "postgresql://postgres@127.0.0.1:5432/postgres"))
    args = ap.parse_args()
    methods = args.methods.split(",")
    if args.latency and "--methods" not in sys.argv[1:]:
        methods = ["skip-locked-next", "batch-10-next"]
    if unknown := set(methods) - set(METHODS):
        ap.error(f"unknown methods: {', '.join(sorted(unknown))}")
    workers = [int(w) for w in args.workers.split(",")]
    delays = []
    if args.latency:
        try:
            delays = [float(d) for d in args.latency.split(",")]
        except ValueError:
            ap.error(f"--latency: not a list of milliseconds: {args.latency!r}")
        if not all(0 <= d <= MAX_RTT_MS for d in delays):
            ap.error(f"--latency: each round trip must be within 0..{MAX_RTT_MS:g} ms, got {args.latency!r}")
    if args.claims_per_worker < 1:
        ap.error(f"--claims-per-worker must be at least 1, got {args.claims_per_worker}")
    bench = Bench(args.database_url, args.jobs)
    if delays:
        try:
            print("\n".join(latency_runs(bench, delays, methods, workers, args.claims_per_worker)))
        finally:
            bench.close()
        return
    try:
        results = []
        for n in workers:
            repeat = args.repeat if n == args.scenario_workers else args.repeat_others
            runs: dict[str, list[Result]] = {m: [] for m in methods}
            for _ in range(repeat):  # round-robin, so that the machine's drift hits every method alike
                for method in methods:
                    runs[method].append(bench.run(bench.fresh(), method, n))
            for method in methods:
                r = median_result(runs[method])
                results.append(r)
                print(f"# {method} x{n}: {r.jobs_per_second:,.0f} jobs/s, claim p50 {r.claim_p50_ms:.2f} ms "
                      f"p99 {r.claim_p99_ms:.2f} ms, jobs run twice {r.runs - args.jobs}", file=sys.stderr, flush=True)
        print(f"{args.jobs:,} no-op jobs per run; median of {args.repeat} runs at {args.scenario_workers} workers, "
              f"{args.repeat_others} elsewhere\n")
        print("| method | workers | jobs/s | claim p50 (ms) | claim p99 (ms) | jobs run twice |")
        print("|---|---:|---:|---:|---:|---:|")
        for r in sorted(results, key=lambda r: (methods.index(r.method), r.workers)):
            print(f"| {r.method} | {r.workers} | {r.jobs_per_second:,.0f} | {r.claim_p50_ms:.2f} | {r.claim_p99_ms:.2f} "
                  f"| {r.runs - args.jobs:,} |")
        print("\n".join(against_the_article(results, args.scenario_workers)))
        if not args.no_scenarios:
            print()
            print("\n".join(scenarios(bench, args.scenario_workers, args.history, args.dead, args.heartbeats,
                                      args.repeat)))
        if args.plot:
            plot(results, args.plot)
    finally:
        bench.close()


if __name__ == "__main__":
    main()
