"""Issue 32 §14: AugServe's ``token_budget_mean`` differed with ``--no-fast-forward`` (8146 vs
8176) while the schedules were identical: it averaged the budget over scheduling decisions,
and fast-forward makes one decision for k decode-only steps. It is now the mean over the steps
the budget can shape (a prefill scheduled or requests waiting), which fast-forward never
covers: every summary metric is the same in both modes."""

from __future__ import annotations

import pytest

from tidal.sim.config import load_config
from tidal.sim.run import run_simulation


def _metrics(fast_forward: bool, memory: dict, batching: str) -> dict:
    cfg = load_config(
        {
            "fast_forward": fast_forward,
            "model": "llama-2-7b",
            "gpu": "a100-80gb",
            "scheduler": {"batching": batching},
            "augment": {"serving_policy": "augserve"},
            "memory": memory,
            "workload": {"augmented": "infercept-mix", "num_requests": 80, "rate": 4},
        }
    )
    m = run_simulation(cfg).metrics
    return {k: v for k, v in m.items() if "wall" not in k and "simulate" not in k}


@pytest.mark.parametrize(
    ("memory", "batching"),
    [({"num_blocks": 1200}, "ebplus"), ({"num_blocks": 1200}, "mb"), ({}, "mb")],
)
def test_augserve_metrics_are_the_same_without_fast_forward(memory, batching):
    fast, stepwise = _metrics(True, memory, batching), _metrics(False, memory, batching)
    assert 384 <= fast["token_budget_mean"] <= 8192  # the dynamic budget's clip range
    diff = {k: (fast[k], stepwise.get(k)) for k in fast if fast[k] != stepwise.get(k)}
    assert not diff, diff
