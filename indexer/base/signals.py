"""The one way a process of ours learns that it should stop: SIGTERM (a container runtime, the
pool) or SIGINT (Ctrl-C) call a handler."""

from __future__ import annotations

import signal
from typing import Callable

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def on_stop(handler: Callable[[], None]) -> None:
    """Calls `handler()` (in the main thread, between bytecodes) on SIGTERM or SIGINT."""
    for sig in STOP_SIGNALS:
        signal.signal(sig, lambda signum, frame: handler())
