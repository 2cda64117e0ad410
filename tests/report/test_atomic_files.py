"""Result files respect the umask; a run directory is replaced whole; no temporary file stays.

Before these fixes: every result file was 0600 whatever the umask (``mkstemp``); re-running into
an existing run directory and dying mid-write left a run that looked complete (summary.json of
the old run beside requests.parquet of the new, or the old run's extra tables beside the new
summary); a killed writer left ``.name.XXXX`` temporary files behind.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tidal.core.errors import ConfigError
from tidal.core.io import atomic_write, write_json
from tidal.experiments.results import write_run


@pytest.fixture
def umask_027() -> Iterator[int]:
    old = os.umask(0o027)
    try:
        yield 0o027
    finally:
        os.umask(old)


def _mode(p: Path) -> int:
    return p.stat().st_mode & 0o777


def test_files_get_0666_minus_the_umask(tmp_path: Path, umask_027: int) -> None:
    write_json(tmp_path / "a.json", {"x": 1})
    assert _mode(tmp_path / "a.json") == 0o640
    os.umask(0o002)
    write_json(tmp_path / "b.json", {"x": 1})
    assert _mode(tmp_path / "b.json") == 0o664
    plain = tmp_path / "plain"
    plain.write_text("x")  # what open() gives: the reference
    assert _mode(tmp_path / "b.json") == _mode(plain)


def _run(out: Path, tag: int, tables: dict[str, dict[str, list[int]]] | None = None) -> None:
    write_run(
        out, {"tag": tag}, tag, {"m": tag}, {"x": [tag]}, {"wall_s": 0.0}, extra_tables=tables
    )


def test_a_run_directory_is_replaced_whole(tmp_path: Path, umask_027: int) -> None:
    out = tmp_path / "run"
    _run(out, 1, {"ebplus": {"t": [1]}})
    _run(out, 2)
    names = sorted(p.name for p in out.iterdir())
    assert names == ["requests.parquet", "run.json", "summary.json"]  # no stale ebplus.parquet
    assert json.loads((out / "summary.json").read_text())["seed"] == 2
    assert _mode(out) == 0o750
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_a_failure_mid_write_keeps_the_old_run_intact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "run"
    _run(out, 1)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    import tidal.experiments.results as results

    real = results.write_json

    def fail_on_summary(path: Path, obj: object) -> None:
        if Path(path).name == "summary.json":
            raise KeyboardInterrupt  # as Ctrl-C between requests.parquet and summary.json
        real(path, obj)

    monkeypatch.setattr(results, "write_json", fail_on_summary)
    with pytest.raises(KeyboardInterrupt):
        _run(out, 2)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_a_directory_that_is_not_a_run_is_refused_not_deleted(tmp_path: Path) -> None:
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    with pytest.raises(ConfigError, match="not a run directory"):
        _run(out, 1)
    assert (out / "notes.txt").read_text() == "keep me"
    empty = tmp_path / "empty"
    empty.mkdir()
    _run(empty, 1)
    assert (empty / "summary.json").exists()


def test_leftovers_of_a_killed_writer_are_cleared_by_the_next_write(tmp_path: Path) -> None:
    out = tmp_path / "run"
    (tmp_path / ".run.tmp-abc").mkdir()
    (tmp_path / ".run.tmp-abc" / "requests.parquet").write_bytes(b"")
    (tmp_path / ".run.old-def").mkdir()
    _run(out, 1)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def test_a_failing_file_write_leaves_no_temporary_file(tmp_path: Path) -> None:
    def boom(p: Path) -> None:
        p.write_text("half")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        atomic_write(tmp_path / "x.json", boom)
    assert list(tmp_path.iterdir()) == []


def _fail_inside(out: Path) -> None:
    from tidal.core.io import replacing_dir

    with replacing_dir(out) as tmp:
        (tmp / "summary.json").write_text("{}")
        raise RuntimeError("stop")


def test_replacing_dir_on_error_removes_only_its_temporary(tmp_path: Path) -> None:
    out = tmp_path / "run"
    _run(out, 1)
    with pytest.raises(RuntimeError):
        _fail_inside(out)
    assert json.loads((out / "summary.json").read_text())["seed"] == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


_SLOW_WRITER = """
import sys, time
from pathlib import Path
import tidal.experiments.results as r
from tidal.core.signals import sigterm_as_exit
real = r.write_parquet
def slow(path, cols):
    real(path, cols)
    Path(sys.argv[2]).write_text("ready")
    time.sleep(60)
r.write_parquet = slow
with sigterm_as_exit():
    r.write_run(sys.argv[1], {"tag": 2}, 2, {"m": 2}, {"x": [2]}, {"wall_s": 0.0})
"""


@pytest.mark.skipif(sys.platform != "linux", reason="signals as on Linux")
def test_sigterm_mid_write_keeps_the_old_run_and_no_temporary_files(tmp_path: Path) -> None:
    """SIGTERM after requests.parquet of the new run is written: exit 143, the old run intact."""
    out = tmp_path / "runs" / "run"
    _run(out, 1)
    ready = tmp_path / "ready"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    proc = subprocess.Popen(
        [sys.executable, "-c", _SLOW_WRITER, str(out), str(ready)],
        env=env,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 60
    while not ready.exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 143, err.decode()[-2000:]
    assert sorted(p.name for p in out.parent.iterdir()) == ["run"]
    assert json.loads((out / "summary.json").read_text())["seed"] == 1
