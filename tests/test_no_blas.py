"""Simulated results do not depend on the CPU they are computed on.

A BLAS or LAPACK routine (``a @ b``, ``np.dot``, ``np.linalg.*``, ``np.polyfit``) picks its
kernel by CPU at run time (OpenBLAS: Haswell, SkylakeX, ...), and the kernels sum in different
orders, so the last bits of a product differ between machines; once such a value decides an
admission or a threshold, the same config and seed give different results on another machine
(seen: EB⁺'s KV forecast, whose planner golden hash differed between an AVX2 and an AVX-512
host). So no module on the simulation path calls one: sums go through numpy's ordered
reductions or ``math.fsum``. The second test runs the golden planner case (EB⁺ and MB on
H100, 24 simulations) under each OpenBLAS kernel the CPU can run and compares the results.
"""

from __future__ import annotations

import ast
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

import tidal

SRC = Path(tidal.__file__).parent
SIM_PATH = ("core", "hardware", "workload", "engine", "cluster", "sim", "experiments")
"""Packages whose arithmetic reaches a simulated result (the runtime runs torch instead)."""
BLAS_CALLS = {
    "dot",
    "matmul",
    "inner",
    "vdot",
    "tensordot",
    "einsum",
    "polyfit",
    "lstsq",
    "solve",
    "inv",
    "pinv",
    "outer",
}
ALLOWED = {
    "hardware/profiled.py": "fits coefficients to measured wall-clock samples (`calibrate`); "
    "the fit is written to a file and the simulator reads the file",
}


def _offences(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
            found.append(f"{node.lineno}: @")
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in BLAS_CALLS
        ):
            found.append(f"{node.lineno}: .{node.func.attr}(")
    return found


def test_no_blas_on_the_simulation_path() -> None:
    bad = []
    for pkg in SIM_PATH:
        for path in sorted((SRC / pkg).rglob("*.py")):
            rel = path.relative_to(SRC).as_posix()
            if rel in ALLOWED:
                continue
            bad += [f"{rel}:{o}" for o in _offences(path)]
    assert not bad, "BLAS-backed arithmetic on the simulation path (CPU-dependent):\n" + "\n".join(
        bad
    )


_CASE = """
from tests.engine.golden_cases import CASES
print(CASES["planner"]())
"""


@pytest.mark.skipif(
    sys.platform != "linux" or platform.machine() != "x86_64",
    reason="OpenBLAS core types of x86-64 Linux",
)
def test_an_ebplus_run_is_identical_under_two_blas_kernels() -> None:
    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    cores = ["Nehalem"] + ["Haswell"] * (" avx2" in flags) + ["SkylakeX"] * (" avx512f" in flags)
    outs = []
    for core in cores:  # only kernels this CPU can run (a forced AVX-512 kernel would SIGILL)
        env = dict(os.environ, OPENBLAS_CORETYPE=core, PYTHONPATH=os.pathsep.join(sys.path))
        proc = subprocess.run(
            [sys.executable, "-c", _CASE], env=env, capture_output=True, text=True, timeout=300
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        outs.append(proc.stdout)
    assert len(set(outs)) == 1, dict(zip(cores, outs, strict=True))
