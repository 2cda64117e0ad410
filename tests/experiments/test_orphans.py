"""Issue 32 §12: a ``tidal sweep`` killed with SIGKILL (no cleanup runs) leaves no pool
worker behind: each worker asked the kernel to kill it with its parent
(:mod:`tidal.core.orphan`)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.experiments.test_sweep_failures import _alive, _descendants


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs Linux /proc")
def test_sigkilled_sweep_leaves_no_worker_processes(tmp_path: Path) -> None:
    cfg = {
        "workload": {"num_requests": 40_000, "rate": 200.0, "prompt_len": 400, "output_len": 100},
        "grid": {"scheduler.token_budget": [512, 1024, 2048, 4096]},
    }
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(cfg))
    code = "import sys; from tidal.cli import app; sys.argv[0] = 'tidal'; app()"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    argv = [sys.executable, "-c", code, "sweep", str(path), "--out", str(tmp_path / "o")]
    proc = subprocess.Popen(
        [*argv, "--workers", "2"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env
    )
    workers: set[int] = set()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(workers) < 2 and proc.poll() is None:
        workers = {
            p
            for p in _descendants(proc.pid)
            if b"spawn_main" in Path(f"/proc/{p}/cmdline").read_bytes()
        }
        time.sleep(0.05)
    assert len(workers) == 2, "the pool did not start"
    time.sleep(1.0)  # past the workers' initializer
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and any(_alive(p) for p in workers):
        time.sleep(0.05)
    left = [p for p in workers if _alive(p)]
    for p in left:  # pragma: no cover - the failure being tested
        os.kill(p, signal.SIGKILL)
    assert not left, "orphan worker processes"
