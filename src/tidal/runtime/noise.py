"""How noisy the machine is while the real engine is timed (``tidal calibrate``, ``fidelity``).

A profile is a snapshot of the machine's speed; on a shared VM that speed moves with the
other tenants. Three measurements say how far a snapshot can be trusted:

* **load**: :class:`LoadMeter` reads ``/proc/stat`` and the load average around a measurement:
  the share of every CPU's time that *other* processes used (busy jiffies minus this
  process's own CPU time, over wall time × CPUs) and the share the hypervisor stole;
* **repeat spread** (:func:`repeat_spread`): the same grid point's mean step time in each
  calibration pass, ``(max − min) / median`` over the passes, median over the points;
* **drift**: the speed probe's time after over before (computed by the callers).

:func:`noise_warnings` turns them into what to do; thresholds are :data:`LIMITS`.
"""

from __future__ import annotations

import os
import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

LIMITS = {"spread": 0.05, "drift": 0.05, "others_share": 0.25, "steal_share": 0.05}
"""Beyond these, a measurement is called noisy: 5 % spread or drift (the fidelity target's
size), other processes on a quarter of the CPUs' time, 5 % of it stolen by the hypervisor."""


def _proc_stat() -> tuple[int, int, int] | None:
    """(busy, steal, total) jiffies over all CPUs, or None where /proc/stat is unreadable."""
    try:
        first = Path("/proc/stat").read_text().splitlines()[0].split()
    except (OSError, IndexError):
        return None
    if not first or first[0] != "cpu":
        return None
    v = [int(x) for x in first[1:]]
    user, nice, system, idle, iowait = v[:5]
    irq, softirq, steal = ([*v[5:8], 0, 0, 0])[:3]
    busy = user + nice + system + irq + softirq
    return busy, steal, busy + idle + iowait + steal


@dataclass
class LoadMeter:
    """Start it before a measurement, :meth:`read` after: the machine's load meanwhile."""

    t0: float = 0.0
    cpu0: float = 0.0
    stat0: tuple[int, int, int] | None = None

    def start(self) -> LoadMeter:
        self.t0, self.cpu0, self.stat0 = time.monotonic(), time.process_time(), _proc_stat()
        return self

    def read(self) -> dict[str, Any]:
        """``others_share`` (0–1) of all CPUs' time used by other processes, ``steal_share``,
        the 1-minute load average now and the CPU count (None where not measurable)."""
        ncpu = os.cpu_count() or 1
        wall = time.monotonic() - self.t0
        own = time.process_time() - self.cpu0
        out: dict[str, Any] = {"cpus": ncpu, "wall_s": wall, "others_share": None}
        out["steal_share"] = None
        try:
            out["loadavg_1m"] = os.getloadavg()[0]
        except OSError:
            out["loadavg_1m"] = None
        stat1 = _proc_stat()
        if self.stat0 is not None and stat1 is not None and wall > 0:
            hz = os.sysconf("SC_CLK_TCK")
            busy = (stat1[0] - self.stat0[0]) / hz
            total = max(stat1[2] - self.stat0[2], 1)
            out["others_share"] = min(max((busy - own) / (wall * ncpu), 0.0), 1.0)
            out["steal_share"] = (stat1[1] - self.stat0[1]) / total
        return out


def repeat_spread(samples: Iterable[Any]) -> float | None:
    """Median over grid points of ``(max − min) / median`` of the point's mean step time in
    each pass (samples carry ``point``, ``repeat`` and ``seconds``); None with one pass."""
    per: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for s in samples:
        per[s.point][s.repeat].append(s.seconds)
    spreads = []
    for passes in per.values():
        if len(passes) < 2:
            continue
        means = np.array([np.mean(v) for v in passes.values()])
        spreads.append((means.max() - means.min()) / np.median(means))
    return float(np.median(spreads)) if spreads else None


def load_warnings(load: dict[str, Any]) -> list[str]:
    """Sentences naming what other tenants took from the machine beyond :data:`LIMITS`."""
    out = []
    others, steal = load.get("others_share"), load.get("steal_share")
    if others is not None and others > LIMITS["others_share"]:
        out.append(
            f"other processes used {others:.0%} of the {load['cpus']} CPUs "
            f"(load average {load.get('loadavg_1m') or 0:.1f})"
        )
    if steal is not None and steal > LIMITS["steal_share"]:
        out.append(f"the hypervisor stole {steal:.0%} of the CPU time")
    return out


def noise_warnings(
    load: dict[str, Any], spread: float | None = None, drift: float | None = None
) -> list[str]:
    """Every noise measurement beyond :data:`LIMITS`, as sentences (empty: a quiet run)."""
    out = load_warnings(load)
    if spread is not None and spread > LIMITS["spread"]:
        out.append(f"the same step shapes differed by {spread:.1%} between passes")
    if drift is not None and abs(drift) > LIMITS["drift"]:
        out.append(f"the speed probe drifted {drift:+.1%} during the measurement")
    return out


def fidelity_warnings(
    load: dict[str, Any],
    floor: dict[str, Any] | None,
    speed_pairs: list[tuple[float, float]],
) -> list[str]:
    """:func:`load_warnings`, plus the engine's disagreement with itself between real runs
    (``floor``: TTFT or TPOT median beyond 5 %: per-request errors below it cannot be resolved)
    and the held-out speed ratio moving within a run (before vs after beyond 5 %)."""
    out = load_warnings(load)
    if floor:
        ttft, tpot = floor.get("ttft_median_rel_error"), floor.get("tpot_median_rel_error")
        if max(ttft or 0.0, tpot or 0.0) > LIMITS["spread"]:
            out.append(
                f"two real runs of the same workload differed per request by {ttft:.1%} TTFT "
                f"and {tpot:.1%} TPOT (the noise floor: smaller simulator errors cannot be "
                "told apart)"
            )
    moved = [abs(after / before - 1) for before, after in speed_pairs if before and after]
    if moved and max(moved) > LIMITS["drift"]:
        out.append(f"the machine's speed moved {max(moved):.1%} within a real run")
    return out
