"""Run ``tidal`` as a user does, in an interactive terminal: stdin, stdout and stderr on a
pseudo-terminal (80×24), so that every ``isatty()`` check and every rich progress bar takes its
terminal path — the path CI, with no TTY, otherwise never sees (issue 31)."""

from __future__ import annotations

import fcntl
import os
import re
import select
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

TIDAL = [
    sys.executable, "-c", "import sys; sys.argv[0] = 'tidal'; from tidal.cli import main; main()"
]  # fmt: skip
"""The console script's entry point under this interpreter (no PATH lookup)."""


def _controlling_terminal() -> None:
    """In the child, after ``setsid``: its stdin (the pty) becomes its controlling terminal."""
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


@dataclass
class PtyResult:
    returncode: int
    output: str
    """Everything the command wrote to the terminal (stdout and stderr interleaved)."""

    @property
    def text(self) -> str:
        """The output without terminal control sequences (colours, cursor moves)."""
        return ANSI.sub("", self.output).replace("\r\n", "\n")


ANSI = re.compile(r"\x1b(\[[0-?]*[ -/]*[@-~]|\][^\x07]*\x07|[@-Z\\-_])")


def run_in_pty(
    args: list[str],
    cwd: Path,
    timeout_s: float = 120.0,
    interrupt_when: Callable[[str, float], bool] | None = None,
    columns: int = 80,
) -> PtyResult:
    """``tidal ARGS`` on a fresh pseudo-terminal, its controlling terminal in a session of its
    own; the terminal is drained as the command writes (a full pty buffer would block it).
    ``interrupt_when(output_so_far, elapsed_s)`` returning True types one Ctrl-C: the terminal
    sends SIGINT to the command and every worker process it started, as a user's does."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    env = {**os.environ, "TERM": "xterm-256color"}
    env.pop("COLUMNS", None)
    env.pop("NO_COLOR", None)
    proc = subprocess.Popen(
        [*TIDAL, *args], stdin=slave, stdout=slave, stderr=slave, cwd=cwd, env=env,
        close_fds=True, start_new_session=True, preexec_fn=_controlling_terminal,
    )  # fmt: skip
    os.close(slave)
    chunks: list[bytes] = []
    t0 = time.monotonic()
    interrupted = False
    try:
        while True:
            elapsed = time.monotonic() - t0
            if elapsed > timeout_s:
                proc.kill()
                raise TimeoutError(f"tidal {' '.join(args)}: no exit in {timeout_s} s")
            ready, _, _ = select.select([master], [], [], 0.1)
            if ready:
                try:
                    data = os.read(master, 65536)
                except OSError:  # EIO: the child closed its end
                    data = b""
                if data:
                    chunks.append(data)
                elif proc.poll() is not None:
                    break
            elif proc.poll() is not None:
                break
            if interrupt_when is not None and not interrupted:
                text = b"".join(chunks).decode(errors="replace")
                if interrupt_when(text, elapsed):
                    os.write(master, b"\x03")  # Ctrl-C: SIGINT to the foreground group
                    interrupted = True
        proc.wait(timeout=10)
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
    return PtyResult(proc.returncode, b"".join(chunks).decode(errors="replace"))
