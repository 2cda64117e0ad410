"""Pool workers die with their parent (issue 32 §12): a ``tidal sweep`` or ``tidal plan``
killed with SIGKILL runs no cleanup, and its spawned workers used to live on, holding the
caller's pipe. On Linux a worker asks the kernel for SIGKILL when its parent dies
(``prctl(PR_SET_PDEATHSIG)``), then checks the parent is still the one that started it (it
may have died before the request); elsewhere a daemon thread polls the parent's pid."""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time

PR_SET_PDEATHSIG = 1
POLL_S = 1.0


def _prctl_pdeathsig() -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def _watch(parent: int) -> None:
    while True:
        time.sleep(POLL_S)
        if os.getppid() != parent:
            os._exit(1)


def die_with_parent(parent: int) -> None:
    """In a worker started by process ``parent``: exit when ``parent`` dies."""
    if not (sys.platform.startswith("linux") and _prctl_pdeathsig()):
        threading.Thread(target=_watch, args=(parent,), daemon=True, name="orphan-watch").start()
    if os.getppid() != parent:  # the parent died before the request took effect
        os._exit(1)
