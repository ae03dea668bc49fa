"""What /livez and /readyz (served beside /metrics, `exporter.listen`) answer: is the process's
loop alive, and does what it needs answer.

- /livez: 200 while the process's own loop has run lately (`Liveness`), 503 otherwise: a
  restart may help. It never asks the database or the node: with either down, restarting every
  pod at once would help nothing, and readiness already says so.
- /readyz: 200 while the database and at least one node endpoint answered their last checks
  (`Dependencies`), 503 with what did not answer. A node endpoint answers when it sends its
  chain id and head as hex numbers, or says it is rate limited (HTTP 429, -32005): that is
  an endpoint alive and busy, not one to give up on.
The 503 bodies name what is wrong and never quote an error (a node's error text may repeat a
URL's key); the errors themselves go to the log, scrubbed. `indexer work` also exits 1 once one
of them has not answered for INDEXER_GIVE_UP_SECONDS (`Dependencies.silent`), saying what its
last check met (`Dependencies.last_error`): a pool that cannot work says so and stops, rather
than wait on forever.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable

import psycopg

from ..base import db
from ..base.errors import first_line, redact
from ..chaindata import chain
from ..node.rpc import RpcClient
from ..node.rpc_errors import RateLimited, RpcError

log = logging.getLogger(__name__)

PING = "SELECT 1"

# One check's longest wait, for the connection or the node's answer. A check stuck longer (a
# server that accepts connections and never answers) simply stops refreshing its answer.
CHECK_TIMEOUT = 5.0


DATABASE = "the database"
NODE = "any node endpoint"


class Liveness:
    """Alive while `tick` was called within `within` seconds: by the loop that must keep running."""

    def __init__(self, within: float) -> None:
        self.within = within
        self._tick = time.monotonic()

    def tick(self) -> None:
        self._tick = time.monotonic()

    def problems(self) -> list[str]:
        idle = time.monotonic() - self._tick
        return [f"the process loop has not run for {idle:.0f} s"] if idle > self.within else []


class Dependencies:
    """The database and the node endpoints, each checked every `every` seconds by a thread of its
    own (a check that hangs holds up no other). What answered is remembered by when."""

    def __init__(self, database_url: str, rpc_urls: list[str], *, every: float, rpc_batch: int,
                 compression: str = "auto") -> None:
        self.every = every
        self._answered = dict.fromkeys((DATABASE, NODE), time.monotonic())
        self._failing: set[str] = set()  # whose last check failed
        self._errors: dict[str, str] = {}  # what the last failed check of each met, scrubbed
        self._stop = threading.Event()
        # A check that fails as the pool stops says nothing: the pool's own last line says why it
        # stopped, and a warning printed after it would hide it.
        self._quiet = threading.Lock()
        self._database_url = database_url
        # Each client shows its endpoint's batch size among the workers' (the least of them is
        # shown): the size they start with, so that the checks never lower it. A rate limit
        # ends a check at once (patience 0), as an answer.
        self._clients = [RpcClient([url], timeout=CHECK_TIMEOUT, max_attempts=1, max_batch=rpc_batch, patience=0,
                                   compression=compression) for url in rpc_urls]
        self._threads = [threading.Thread(target=self._loop, args=(name, check), name=f"health {name}", daemon=True)
                         for name, check in ((DATABASE, self._database), (NODE, self._node))]

    def start(self) -> "Dependencies":
        """Checks from now on; both answered just before (the pool's start-up checks)."""
        self._answered = dict.fromkeys(self._answered, time.monotonic())
        for t in self._threads:
            t.start()
        return self

    def stop(self) -> None:
        with self._quiet:
            self._stop.set()

    def silent(self) -> list[tuple[str, float]]:
        """Each dependency with the seconds since it last answered."""
        now = time.monotonic()
        return [(name, now - at) for name, at in self._answered.items()]

    def last_error(self, name: str) -> str | None:
        """What the last check of `name` met, if it failed (scrubbed: it may go to stderr)."""
        return self._errors.get(name) if name in self._failing else None

    def problems(self) -> list[str]:
        """Not ready: the last check of a dependency failed, or it is overdue (a check that hangs)."""
        overdue = 2 * self.every + CHECK_TIMEOUT
        return [f"no answer from {name} for {seconds:.0f} s" for name, seconds in self.silent()
                if name in self._failing or seconds > overdue]

    def _loop(self, name: str, check: Callable[[], None]) -> None:
        while not self._stop.wait(self.every):
            try:
                check()
                self._answered[name] = time.monotonic()
                self._failing.discard(name)
            except Exception as exc:  # whatever went wrong, it did not answer; the thread goes on
                self._errors[name] = redact(first_line(exc))
                self._failing.add(name)
                with self._quiet:
                    if not self._stop.is_set():
                        log.warning("health: no answer from %s: %s", name, self._errors[name])

    def _database(self) -> None:
        with psycopg.connect(self._database_url, autocommit=True, connect_timeout=int(CHECK_TIMEOUT),
                             application_name="indexer health",
                             options=db.options_with(self._database_url,
                                                     f"-c statement_timeout={int(CHECK_TIMEOUT * 1000)}")) as conn:
            conn.execute(PING)

    def _node(self) -> None:
        """Returns once one endpoint answers its chain id and head, or that it is rate limited;
        raises the last error if none does."""
        error: Exception | None = None
        for client in self._clients:
            try:
                client.batch([("eth_chainId", ()), ("eth_blockNumber", ())], parse=chain.quantity)
                return
            except RateLimited:
                return
            except (RpcError, chain.ChainDataError) as exc:
                error = exc
        assert error is not None
        raise error
