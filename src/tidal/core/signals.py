"""Signals as exceptions, so that cleanup code runs when a run is stopped."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def sigterm_as_exit() -> Iterator[None]:
    """Within the block SIGTERM raises ``SystemExit(143)``, so that ``finally`` clauses run
    (worker pools stopped, temporary files removed) as they do for Ctrl-C. Main thread only."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
