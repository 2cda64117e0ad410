"""Augmented (tool-calling) requests on a disaggregated deployment (issue 29 item 5; design:
docs/design/disagg-cluster-composition.md §A).

The prompt is prefilled on the prefill pool, whose scheduler is the plain one of the pool's
batching policy (a prefill leg samples one token and never reaches a call); its KV moves to the
decode pool as any request's does (``sim/disagg_wiring.py``). The decode pool runs the
augmented scheduler of ``augment.*`` (INFERCEPT / AugServe over ``mb`` or ``prefill-first``):
a request pauses there at its call points, and the intercept policy (Preserve, Discard, Swap to
the decode host's swap space) applies to its KV on the decode GPUs. When the call returns, the
appended tool-output tokens — and, after a Discard or a preemption, the whole context — are
prefilled **on the decode pool**, as a continuing sequence, the way vLLM's and SGLang's PD
deployments treat one (a multi-turn continuation is a new request to the proxy, but a resumed
call is inside one request: only its first prompt went through the prefill pool).

Fast-forward: a decode instance stops its runs at its own next call return
(:meth:`Simulation.next_resume_ns`), as a cluster engine does; every other input reaches it
through ``deliver`` / ``notify``, which cut runs exactly.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from tidal.augment.component import Augmentation
from tidal.core.augmented_metrics import augmented_metrics
from tidal.sim.config import SimulationConfig
from tidal.sim.instance import SimInstance
from tidal.sim.simulator import Simulation

COUNTERS = (
    "num_intercepts", "intercepts_preserved", "intercepts_discarded", "intercepts_swapped",
    "recompute_tokens", "recompute_hit_tokens", "swap_out_tokens", "swap_in_tokens",
    "kv_reclaims", "waste_preserve_gb_s", "waste_recompute_gb_s", "waste_swap_gb_s",
)  # fmt: skip
"""Per-instance augmentation metrics that add up over a pool's instances."""


def plain_prefill(pcfg: SimulationConfig) -> SimulationConfig:
    """The prefill pool's config: without ``workload.augmented`` its instances get the plain
    scheduler (the pool never sees a call; unvalidated copy, the workload is not rebuilt)."""
    if pcfg.workload.augmented is None:
        return pcfg
    workload = pcfg.workload.model_copy(update={"augmented": None})
    return pcfg.model_copy(update={"workload": workload})


def decode_horizon(sim: Simulation, n_pre: int) -> Callable[[int], Callable[[], int]]:
    """Per-instance fast-forward horizons: prefill instances stop at the next external event;
    decode instances at their own next call return (INF_NS: none pending)."""

    def horizon(idx: int) -> Callable[[], int]:
        if idx < n_pre:
            return sim.next_external_ns
        return lambda: sim.next_resume_ns(idx)

    return horizon


def augmentations(insts: Iterable[SimInstance]) -> list[Augmentation]:
    out = []
    for inst in insts:
        aug = inst.scheduler.augmentation
        if isinstance(aug, Augmentation):
            out.append(aug)
    return out


def pool_augment_summary(insts: list[SimInstance]) -> dict[str, Any]:
    """A pool's interception counters and waste, summed over its instances (zeros on the
    prefill pool: its legs never reach a call), the recompute share and budget mean pooled."""
    augs = augmentations(insts)
    per = [a.extra_metrics() for a in augs]
    out: dict[str, Any] = {k: sum(m[k] for m in per) if per else 0 for k in COUNTERS}
    fwd = sum(a.forward_ns for a in augs)
    out["recompute_time_share"] = sum(a.recompute_ns for a in augs) / max(fwd, 1)
    if augs:
        n = sum(a.budget_n for a in augs)
        out["token_budget_mean"] = sum(a.budget_sum for a in augs) / max(n, 1)
    return out


def augmented_disagg_metrics(
    cfg: SimulationConfig, cols: Any, pools: dict[str, list[SimInstance]]
) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """(top-level metrics, per-pool interception summaries) of an augmented disaggregated run:
    the single-instance run's augmented metrics (effective throughput, normalized latency,
    calls), ``paused_time_s`` (Σ time requests spent paused on calls, all on the decode pool)
    and the decode pool's interception counters at the top level, as a single run reports
    them."""
    m = augmented_metrics(cols, cfg.slo.ttft_s, cfg.slo.norm_latency_s)
    done = np.asarray(cols["finish_ns"]) >= 0
    m["paused_time_s"] = float(np.asarray(cols["call_ns"])[done].sum()) / 1e9
    per_pool = {role: pool_augment_summary(insts) for role, insts in pools.items()}
    m.update(per_pool["decode"])
    return m, per_pool
