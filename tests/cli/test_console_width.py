"""CLI output does not depend on the terminal's width unless it goes to a terminal."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tidal.cli import UNWRAPPED_WIDTH, console, err_console

SRC = str(Path(__file__).resolve().parents[2] / "src")


class _FakeTTY(io.StringIO):
    def isatty(self) -> bool:
        return True

    def fileno(self) -> int:
        raise io.UnsupportedOperation


@pytest.mark.parametrize("columns", ["40", "200"])
def test_piped_output_never_wraps_whatever_columns_says(columns: str) -> None:
    line = " ".join(["word"] * 60)  # 299 columns
    code = f"from tidal.cli import console, err_console; console.print({line!r}); err_console.print({line!r})"  # noqa: E501
    env = {**os.environ, "COLUMNS": columns, "PYTHONPATH": SRC}
    res = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    assert res.stdout == line + "\n"
    assert res.stderr == line + "\n"
    assert "\x1b[" not in res.stdout  # no colour codes in a pipe


def test_a_terminal_seen_first_does_not_leak_into_a_later_capture(monkeypatch) -> None:
    """Under ``pytest -s`` in a terminal the console first meets a tty; a test runner's buffer
    replacing ``sys.stdout`` afterwards must get unwrapped, uncoloured lines again."""
    monkeypatch.setenv("COLUMNS", "40")
    monkeypatch.setattr(sys, "stdout", _FakeTTY())
    assert console.width == 40  # a terminal: its own width
    buf = io.StringIO()
    monkeypatch.setattr(sys, "stdout", buf)
    assert console.width == UNWRAPPED_WIDTH
    console.print("x" * 120, style="bold")
    assert buf.getvalue() == "x" * 120 + "\n"
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    err_console.print("y" * 90)
    assert err.getvalue() == "y" * 90 + "\n"
