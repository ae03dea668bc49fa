"""What a job's runner is given of the worker that claimed the job, and nothing more.

A runner (`index_blocks`, `decode_logs`, `partitions`, `index_traces`) works through this view:
its worker's session and settings, whether to stop, how to keep its leases, how to end the job
and claim the next, and for block ranges the fetching ahead. `worker.Worker` is one; a runner
never imports it, so the worker can dispatch to the runners without a circle, and a new job kind
touches only its own module and `worker.RUNNERS`.
"""

from __future__ import annotations

import threading
from typing import Protocol

import psycopg

from ..base.settings import Settings
from ..chaindata.chain import SafeHead
from ..chaindata.prefetch import Batches, Prefetcher
from ..jobqueue.claims import Ended
from ..jobqueue.queue import Claim
from ..node.endpoints import Recorder
from ..node.rpc import RpcClient


class Counting(Protocol):
    """The pool's progress counters, as a worker adds to them."""

    def add(self, blocks: int = 0, jobs: int = 0) -> None: ...

    def drained_to(self, safe_head: int) -> None: ...


class JobContext(Protocol):
    client: RpcClient  # the node's endpoints
    name: str  # `locked_by`: the machine or pod, then the process
    cfg: Settings
    stop: threading.Event  # set on SIGTERM/SIGINT: a runner stops at its next batch (`claims.Stopping`)
    counters: Counting | None  # the pool's, for its progress line; None outside a pool
    safe_head: SafeHead  # the highest block a range may be indexed to
    prefetch: Prefetcher  # a range's batches, fetched ahead of the writer
    endpoint_rates: Recorder  # each endpoint's rate, for `indexer status`

    @property
    def conn(self) -> psycopg.Connection:
        """The worker's session, reconnected if it was lost."""

    def keep_alive(self) -> None:
        """Extends the lease of every job held while a slow node is waited on."""

    def claim_ahead(self) -> Batches | None:
        """Claims the next job while this one finishes; what to fetch of it."""

    def complete_and_claim(self, job: Claim, done: Ended) -> Ended:
        """Completes `job` with its token and claims the next in the same statement."""
