"""The node's new heads over WebSocket (INDEXER_WS_URL): a thread of a following pool that keeps
an `eth_subscribe("newHeads")` subscription open and, at each head the node announces, wakes
the head planner (`follow.HeadPlanner.wake`), so that a new block is planned at once rather
than at the next poll.

The subscription only hastens the polls: the head planner polls every INDEXER_HEAD_POLL_SECONDS
whatever it does, so a subscription that drops, cannot be opened, is refused or brings nonsense
loses no block. The thread then opens a new connection after a backoff: RETRY_SECONDS, doubled
with each failure in a row up to MAX_RETRY_SECONDS, jittered (every pool of a fleet would
otherwise come back at the same instant after a node's restart); the run of failures ends with
the first head a subscription brings, not with a subscription accepted, so that a node that
accepts and then sends nonsense is not asked again twice a second. Opening a subscription wakes
the planner too, for a head announced while there was none.

What the thread logs names the node by its label (scheme://host:port, `urls.endpoint_label`):
providers put their keys in the URL's path, query or user part, and the text of an exception or
of the node's answer is scrubbed of them as well. A failure is a warning once; the same failure
again at each retry is logged at DEBUG, so that a node that never allows subscriptions says so
once, not twice a minute. Heads arriving again after a failure are logged once. The WebSocket
library's own lines below INFO (each frame, and the handshake's headers: a URL's user:password is
one, in base64) are never logged (CONNECTION_LOG).

The thread sees the stop event within WATCH_SECONDS while it waits for a head or a retry; a
connection being opened, or a subscription being answered, at that moment takes up to
OPEN_SECONDS or ANSWER_SECONDS, which the pool does not wait for (STOP_SECONDS): the thread holds
nothing of the fleet (no database session, no lock) and ends with the process. Whatever goes
wrong in it, an error of its own included, ends in a retry, never in the thread's death (whose
traceback would not go through the log's scrubbing).
"""

from __future__ import annotations

import logging
import random
import threading
from typing import Any

import orjson
from websockets.exceptions import ConnectionClosed, WebSocketException
from websockets.sync.client import ClientConnection, connect

from ..base import metrics
from ..base.errors import Secrets, first_line
from ..base.urls import endpoint_label

log = logging.getLogger(__name__)

OPEN_SECONDS = 10.0  # TCP, TLS and the WebSocket handshake of a remote node
ANSWER_SECONDS = 10.0  # for the answer to eth_subscribe
WATCH_SECONDS = 0.5  # how soon a thread waiting for a head sees the stop event
STOP_SECONDS = 1.0  # how long the pool waits for the thread at its stop
RETRY_SECONDS = 0.5
MAX_RETRY_SECONDS = 30.0

# websockets logs each frame at DEBUG, and the handshake's headers, among them the Authorization
# header a URL's user:password becomes (in base64, which the log scrubber cannot recognise): its
# connections log into a logger of their own, held at INFO whatever INDEXER_LOG_LEVEL says.
CONNECTION_LOG = logging.getLogger(f"{__name__}.connection")
CONNECTION_LOG.setLevel(logging.INFO)

# Sent as a text frame, as JSON-RPC over WebSocket is: a node may refuse a binary one.
SUBSCRIBE = orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "eth_subscribe", "params": ["newHeads"]}).decode()


class Lost(Exception):
    """Why a subscription ended, or could not begin: one line, scrubbed of the URL's secrets."""


def retry_delay(failures: int) -> float:
    """Seconds before the next connection after `failures` in a row (1 or more)."""
    return min(MAX_RETRY_SECONDS, RETRY_SECONDS * 2 ** (failures - 1)) * random.uniform(0.5, 1.0)


class HeadSubscription:
    """Sets `wake` at each new head the node at `url` announces (see the module's docstring)."""

    def __init__(self, url: str, wake: threading.Event) -> None:
        self.url = url
        self.label = endpoint_label(url)
        self.wake = wake
        self._secrets = Secrets([url])
        self._heard = False  # a head has come over the current connection
        self._warned: str | None = None  # the failure last logged as a warning, until heads come again

    def run(self, stop: threading.Event) -> None:
        failures = 0
        while not stop.is_set():
            self._heard = False
            try:
                self._listen(stop)
                return
            except Lost as lost:
                why = str(lost)
            except Exception as exc:  # a bug or a library's surprise: polling still finds every head
                why = f"{type(exc).__name__}: {self._scrubbed(first_line(exc))}"
            finally:
                metrics.counted.subscribed.set(0)
            if self._heard:  # it was working: a new run of failures, and a new warning
                failures = 0
                self._warned = None
            failures += 1
            delay = retry_delay(failures)
            log.log(logging.DEBUG if why == self._warned else logging.WARNING,
                    "head subscription at %s: %s; polling goes on, subscribing again in %.1f s", self.label, why, delay)
            self._warned = why
            if stop.wait(delay):
                return

    def _listen(self, stop: threading.Event) -> None:
        """One connection: its subscription, then its heads until `stop` (returns) or a failure
        (Lost)."""
        try:
            connection = connect(self.url, open_timeout=OPEN_SECONDS, close_timeout=WATCH_SECONDS,
                                 logger=CONNECTION_LOG)
        except (OSError, WebSocketException) as exc:  # TimeoutError is an OSError
            raise Lost(f"cannot connect: {self._scrubbed(first_line(exc))}") from None
        with connection:
            try:
                subscription = self._subscribe(connection)
                metrics.counted.subscribed.set(1)
                log.log(logging.INFO if self._warned is None else logging.DEBUG,
                        "head subscription at %s: subscribed to newHeads; each new head is planned at once", self.label)
                self.wake.set()
                while not stop.is_set():
                    try:
                        message = connection.recv(timeout=WATCH_SECONDS)
                    except TimeoutError:
                        continue
                    self._notified(message, subscription)
            except ConnectionClosed as exc:
                raise Lost(f"the connection closed ({self._scrubbed(first_line(exc))})") from None
            except OSError as exc:
                raise Lost(f"the connection failed ({self._scrubbed(first_line(exc))})") from None

    def _subscribe(self, connection: ClientConnection) -> str:
        connection.send(SUBSCRIBE)
        try:
            answer = self._parsed(connection.recv(timeout=ANSWER_SECONDS), "an answer to eth_subscribe")
        except TimeoutError:
            raise Lost(f"no answer to eth_subscribe within {ANSWER_SECONDS:g} s") from None
        if answer.get("id") != 1:
            raise Lost(f"the node sent {self._shown(answer)}, not an answer to eth_subscribe")
        error = answer.get("error")
        if error is not None:
            message = error.get("message") if isinstance(error, dict) else error
            code = error.get("code") if isinstance(error, dict) else None
            raise Lost(f"the node refused eth_subscribe: {self._scrubbed(' '.join(str(message).split()))[:200]}"
                       + (f" (code {code})" if isinstance(code, int) else ""))
        subscription = answer.get("result")
        if not isinstance(subscription, str) or not subscription:
            raise Lost(f"the node answered eth_subscribe with {self._shown(subscription)}, not a subscription id")
        return subscription

    def _notified(self, message: str | bytes, subscription: str) -> None:
        notification = self._parsed(message, "a newHeads notification")
        params = notification.get("params")
        if notification.get("method") != "eth_subscription" or not isinstance(params, dict) \
                or params.get("subscription") != subscription:
            raise Lost(f"the node sent {self._shown(notification)}, not a newHeads notification")
        metrics.counted.new_heads.inc()
        if not self._heard:
            self._heard = True
            if self._warned is not None:
                log.info("head subscription at %s: new heads arrive again; each is planned at once", self.label)
        self.wake.set()

    def _parsed(self, message: str | bytes, expected: str) -> dict[str, Any]:
        try:
            value = orjson.loads(message)
        except orjson.JSONDecodeError:
            value = message
        if not isinstance(value, dict):
            raise Lost(f"the node sent {self._shown(value)}, not {expected}")
        return value

    def _shown(self, value: Any) -> str:
        text = value.decode(errors="replace") if isinstance(value, bytes) else value
        text = text if isinstance(text, str) else orjson.dumps(text).decode()
        return repr(self._scrubbed(text)[:60])  # scrubbed whole: a key cut in two would no longer match

    def _scrubbed(self, text: str) -> str:
        return self._secrets.scrub(text)
