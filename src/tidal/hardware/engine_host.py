"""The serving engine's host time between GPU steps, by engine version (issue 28 item 5).

vLLM V1's engine core runs, each step, ``Scheduler.schedule()``, hands the scheduler output to
the workers (a message to each worker process at TP > 1), and after the forward pass
``Scheduler.update_from_output()`` (``vllm/v1/engine/core.py``, ``EngineCore.step``). Where
the scheduling is **synchronous** the GPU waits for all of it: the CPU time is added to the
step. With **async scheduling** (``--async-scheduling``: vllm-project/vllm pull request 19970,
"Implement Async Scheduling"; the model runner fully overlapped by pull request 23569) the
engine core schedules step N+1 while the GPU runs step N (``EngineCore.step_with_batch_queue``,
two batches in flight), so the same CPU time is exposed only where it outlasts the GPU step:
``max(gpu, cpu)``. Async scheduling became vLLM's default in 0.14.0 (pull request 27614,
"[Core] Enable async scheduling by default"; 0.14.0's release notes); before, it was opt-in.

The CPU time is ``step_us + per_seq_us · S`` for S sequences in the step (integer ns after
rounding, affine in S, so fast-forward stays exact). Its constants
(:data:`VLLM_SYNC_HOST`) are **fitted**: on one group of the silicon sample only (NVIDIA's gap
analysis, vLLM 0.12.0, Qwen3-32B bf16, H100, TP 2: the median TPOT gap silicon − Tidal per
concurrency C ∈ {8, 16, 32, 64, 128}, least squares in C), every other group held out
(docs/design/host_time.md). No public measurement gives both constants for this engine
version; the fit's order of magnitude agrees with the V1 engine's synchronous decode-to-decode
gap reported on vLLM issue 10634 (5–6 ms at 256 sequences, Llama-2-7B), which async
scheduling cut to 150–170 µs (pull request 11133).

Tidal's other host term (``hosts["vllm-v1"]``, :mod:`tidal.hardware.roofline_constants`) was
fitted on timings around ``execute_model`` (inside the worker) and stays as it was.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

__all__ = [
    "ASYNC_SCHEDULING_SINCE",
    "VLLM_ASYNC_HOST",
    "VLLM_SYNC_HOST",
    "EngineHost",
    "async_scheduling_default",
    "engine_host",
    "first_at_least",
    "schedules_ahead",
]

ASYNC_SCHEDULING_SINCE = {"vllm": (0, 14, 0)}
"""First version whose ``--async-scheduling`` defaults to on, by engine (vLLM: pull request
27614, released in 0.14.0). SGLang's overlap scheduler is on by default in every version with
tables (0.5.x): its host time is not modelled here (its rows show no such gap)."""


@dataclass(frozen=True)
class EngineHost:
    """Engine-core CPU time of a step: ``step_us + per_seq_us · seqs`` µs; ``overlapped``:
    async scheduling (exposed as ``max(gpu, cpu)``), else synchronous (``gpu + cpu``)."""

    step_us: float
    per_seq_us: float
    overlapped: bool
    source: str

    def cpu_s(self, seqs: int) -> float:
        """The CPU time of a step of ``seqs`` sequences, in seconds (0 for an empty step)."""
        return (self.step_us + self.per_seq_us * seqs) * 1e-6 if seqs > 0 else 0.0

    def describe(self) -> dict[str, object]:
        return {
            "scheduling": "async" if self.overlapped else "sync",
            "step_us": self.step_us,
            "per_seq_us": self.per_seq_us,
            "source": self.source,
        }


VLLM_SYNC_HOST = (748.9, 41.74)
"""vLLM V1 engine-core CPU time per step (µs) and per scheduled sequence (µs): fitted on the
vLLM 0.12.0 Qwen3-32B bf16 H100 TP 2 rows of the silicon sample (30 rows; the other TPs,
models, GPUs and versions held out; docs/design/host_time.md)."""


VLLM_ASYNC_HOST = (0.0, 0.0)
"""The engine-core CPU time exposed under async scheduling: none. The synchronous fit above
does not carry over: async versions also reworked the engine core's output path, and the one
async row of the silicon sample where the fit would show (vLLM, H100, TP 8, 512 sequences:
5.3 ms measured TPOT against the fit's 22.1 ms of CPU time) says the newer engine's CPU time
is several times smaller; vllm-project/vllm pull request 11133 measured the remaining
decode-to-decode gap at 150–170 µs. Until a measurement of a current version exists, async
scheduling adds nothing (``max(gpu, 0) = gpu``); :class:`EngineHost` keeps the ``max`` rule
for when one does."""


def _release(version: str) -> tuple[int, ...] | None:
    """``0.12.0`` → (0, 12, 0); a nightly build (newer than every release) or a version
    without leading digits → None."""
    m = re.match(r"(\d+(?:\.\d+)*)", version)
    return tuple(int(p) for p in m.group(1).split(".")) if m else None


def async_scheduling_default(engine: str, version: str | None) -> bool:
    """Whether ``engine`` at ``version`` schedules asynchronously by default (None, a
    nightly build or an unparsable version: the newest, which does)."""
    since = ASYNC_SCHEDULING_SINCE.get(engine)
    if since is None:
        return True
    rel = _release(version) if version else None
    return rel is None or rel >= since


def engine_host(
    engine: str, version: str | None, async_scheduling: bool | None
) -> EngineHost | None:
    """The engine-core host term of a deployment, or None where none is modelled (SGLang).
    ``async_scheduling``: vLLM's ``--async-scheduling`` / ``--no-async-scheduling``; None:
    the version's default (:func:`async_scheduling_default`)."""
    if engine != "vllm":
        return None
    overlapped = async_scheduling_default(engine, version) if async_scheduling is None \
        else async_scheduling  # fmt: skip
    if overlapped:
        step, per_seq = VLLM_ASYNC_HOST
        return EngineHost(step, per_seq, True, "async scheduling: no exposed CPU time modelled")
    step, per_seq = VLLM_SYNC_HOST
    return EngineHost(step, per_seq, False, "fit: vLLM 0.12.0 Qwen3-32B H100 TP 2 rows")


def schedules_ahead(engine: str, version: str | None, async_scheduling: bool | None) -> bool:
    """Whether the engine core plans the next step while the GPU runs this one, so that a
    request arriving during a step is scheduled one step later (the admission lag of
    :class:`tidal.engine.engine.Engine`). vLLM: async scheduling (``--async-scheduling``, its
    version's default when None): ``step_with_batch_queue`` schedules step N + 1 right after
    launching N, and ``run_busy_loop`` reads the input queue only between steps
    (``vllm/v1/engine/core.py``). SGLang: its overlap scheduler, on by default
    (``--disable-overlap-schedule`` turns it off; not modelled): ``event_loop_overlap``
    receives requests, then launches batch N + 1 before it processes batch N's result."""
    if engine == "sglang":
        return True
    if engine != "vllm":
        return False
    return async_scheduling_default(engine, version) if async_scheduling is None \
        else async_scheduling  # fmt: skip


def first_at_least(c: float, a: float, lo: int, hi: float, level: float) -> float:
    """The smallest integer x in [lo, hi) with ``c + a·x >= level`` (evaluated as written,
    a > 0), or ``hi`` when there is none: where an increasing affine GPU step overtakes a
    constant CPU time."""
    x = max(lo, math.ceil((level - c) / a))
    while x > lo and c + a * (x - 1) >= level:
        x -= 1
    while x < hi and c + a * x < level:
        x += 1
    return min(float(x), hi)
