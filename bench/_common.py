"""Shared helpers for benchmarks: timing with medians and markdown tables."""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parent / "out"
PINNED_PERF_MODEL = "auto-vidur"
"""The step model of the results these scripts recorded (BENCHMARKS.md, bench/results): ``auto``
before issue 28 made the engine tables its second choice (a paper's calibration, else the
Vidur profiles, else the corrected roofline). The papers' reproductions keep it."""


def median_time(fn: Callable[[], Any], repeats: int) -> tuple[float, list[float], Any]:
    times, result = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), times, result


def save(name: str, data: dict[str, Any]) -> Path:
    OUT.mkdir(exist_ok=True)
    path = OUT / f"{name}.json"
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    return path


def md_table(header: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)
