"""Factories for the exclusive-batching policies in tests."""

from __future__ import annotations

from tidal.batching.eb_options import EBOptions
from tidal.core.kv import KVBlockManager
from tidal.engine.build import build_scheduler
from tidal.engine.scheduler import Scheduler, SchedulerConfig
from tidal.hardware.interference import Quadratic, StepCosts

H200_COSTS = StepCosts(
    1.2786e-3, 24.853e-6, 8.9212e-3, 45.865e-6, Quadratic(8.7e-8, 3.0918e-5, 1.478e-5)
)
"""The paper's Qwen3-8B/H200 constants (ebplus.md §1.1) with its ΔI (§1.2)."""


def make_eb(
    num_blocks: int = 1000,
    block_size: int = 16,
    token_budget: int = 512,
    max_seqs: int = 64,
    batching: str = "eb",
    costs: StepCosts = H200_COSTS,
    watermark: float = 0.0,
    **opts: object,
) -> Scheduler:
    kv = KVBlockManager(num_blocks, block_size, watermark)
    cfg = SchedulerConfig(token_budget, max_seqs, costs=costs, eb=EBOptions(**opts))
    return build_scheduler(cfg, kv, batching)


def run_closed_loop(batching: str, gpu: str, conc: int, n: int, prompt: int, output: int, **sched):
    """Qwen3-8B on ``gpu`` under ``conc`` closed-loop clients, uniform lengths around
    (prompt, output): the EB paper's benchmark protocol in miniature. Returns the SimResult."""
    from tidal.sim.config import load_config
    from tidal.sim.run import run_simulation

    cfg = load_config(
        {
            "model": "qwen3-8b",
            "gpu": gpu,
            "scheduler": {"batching": batching, **sched},
            "workload": {
                "num_requests": n,
                "concurrency": conc,
                "prompt_len": prompt,
                "output_len": output,
                "length_dist": "uniform",
            },
        }
    )
    return run_simulation(cfg)
