"""Shared pieces of the EB/EB⁺ benchmarks: the paper's workloads and grids, one-run helpers
with the paper's warm-up protocol, and the reference numbers (``docs/research/ebplus.md`` §5).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from _common import PINNED_PERF_MODEL

from tidal.hardware import interference
from tidal.hardware.interference import Quadratic
from tidal.sim.config import load_config
from tidal.sim.phased import run_with_warmup

MIXES = {"DH": (128, 1024), "BAL": (512, 512), "PH": (1024, 128)}
"""The three synthetic mixes (μ_L, μ_O): decode-heavy, balanced, prefill-heavy (§5.1)."""

VALIDATION_BN = {"DH": (16384, 2048), "BAL": (14336, 1024), "PH": (18432, 512)}
"""The authors' per-workload (B, N) script defaults (VAL / SYN scripts)."""

GRID_B = (4096, 8192, 10240, 14336, 16384, 18432)
GRID_N = (256, 512, 1024, 1536, 2048)
"""The paper's (B, N) grid (SYN ``run_grid_search_cfr.sh``)."""

FIG4_RPS = {
    # ebplus.md §5.3 (H200 v1/EB from RREPORT's exact values; RTX read off the bar chart)
    "h200": {"mb": (13.85, 20.26, 28.55), "eb": (13.58, 20.41, 28.72)},
    "rtx-pro-6000": {"mb": (5.3, 7.7, 10.3), "eb": (6.1, 9.2, 14.6)},
}


def fig4_tokps(gpu: str, sched: str) -> dict[str, float]:
    """Fig. 4 RPS × mean tokens per request (μ_L + μ_O) = total token throughput."""
    rps = FIG4_RPS[gpu][sched]
    return {m: r * sum(MIXES[m]) for m, r in zip(MIXES, rps, strict=True)}


@dataclass
class Cell:
    gpu: str
    batching: str
    prompt: int
    output: int
    concurrency: int
    budget: int
    max_seqs: int
    num_requests: int = 4000
    warmup: int = 100
    model: str = "qwen3-8b"
    length_dist: str = "uniform"
    seed: int = 0
    eb: dict[str, Any] | None = None
    perf_model: str = PINNED_PERF_MODEL
    """``auto`` before issue 28: the EB paper's calibration on H200 / RTX PRO 6000, else the
    Vidur profiles, else the corrected roofline (the recorded EB / EB⁺ tables)."""

    def config(self) -> Any:
        sched: dict[str, Any] = {
            "batching": self.batching,
            "token_budget": self.budget,
            "max_seqs": self.max_seqs,
        }
        if self.eb:
            sched["eb"] = self.eb
        return load_config(
            {
                "model": self.model,
                "gpu": self.gpu,
                "perf_model": self.perf_model,
                # measured where it exists, bandwidth-derived elsewhere (what-if GPUs, L40S, B200)
                "interference": True,
                "seed": self.seed,
                "scheduler": sched,
                "workload": {
                    "num_requests": self.num_requests,
                    "concurrency": self.concurrency,
                    "prompt_len": self.prompt,
                    "output_len": self.output,
                    "length_dist": self.length_dist,
                },
            }
        )


def run_cell(cell: Cell) -> dict[str, Any]:
    """Metrics of one run after ``cell.warmup`` warm-up requests (vllm bench serve
    ``--num-warmups``: they complete before the measured requests are sent)."""
    res = run_with_warmup(cell.config(), cell.warmup)
    return res.metrics


def with_step_interference(gpu: str, q: Quadratic) -> None:
    """Patch the step-level interference of Qwen3-8B on a measured GPU (calibration)."""
    interference.STEP_INTERFERENCE[("qwen3-8b", gpu, 1)] = q


def best_of_grid(
    gpu: str,
    batching: str,
    mix: str,
    concurrency: int = 2048,
    grid_b: tuple[int, ...] = GRID_B,
    grid_n: tuple[int, ...] = GRID_N,
    **kw: Any,
) -> tuple[dict[str, Any], tuple[int, int]]:
    """The best (B, N) cell by total token throughput (each scheduler at its own best)."""
    prompt, output = MIXES.get(mix, (0, 0)) if isinstance(mix, str) else mix
    best: tuple[dict[str, Any], tuple[int, int]] | None = None
    for b in grid_b:
        for n in grid_n:
            if b < n:
                continue
            m = run_cell(Cell(gpu, batching, prompt, output, concurrency, b, n, **kw))
            if best is None or m["token_throughput"] > best[0]["token_throughput"]:
                best = (m, (b, n))
    assert best is not None
    return best
