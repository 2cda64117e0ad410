"""AugServe beyond the papers' testbeds (issue 18): each cause found on the robustness grid,
tested on the setting it was found in (``bench/robustness.py``), and the fallback that holds
the guarantee where the dynamic budget's premise fails."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from tests.augment.helpers import make, run, spec, workload
from tidal.augment.budget import DynamicBudget, running_growth
from tidal.augment.predictor import Prediction
from tidal.sim.config import load_config
from tidal.sim.run import run_simulation

S = 1_000_000_000


def test_budget_falls_back_to_b_min_for_the_cooldown_after_pressure() -> None:
    kv = SimpleNamespace(num_free_blocks=300, watermark_blocks=10, block_size=16)
    s = SimpleNamespace(
        kv=kv, paused_gpu_blocks=lambda: 50, pool=[None] * 40, last_pressure_ns=-1, _now=0
    )
    s.fallback_steps = 0
    b = DynamicBudget(b_min=384, b_max=8192, reserve=1000, cooldown_ns=10 * S, growth_factor=0)
    assert b.budget(s) == 4400  # (300 − 10)·16 + 50·16 − 40 − 1000, no pressure yet
    s.last_pressure_ns = 5 * S  # a preemption or reclaim at t = 5 s
    for now in (5 * S, 15 * S - 1):
        s._now = now
        assert b.budget(s) == 384
    s._now = 15 * S  # the cooldown has passed without another event
    assert b.budget(s) == 4400
    assert s.fallback_steps == 2
    off = DynamicBudget(b_min=384, b_max=8192, reserve=1000, cooldown_ns=0, growth_factor=0)
    s._now, s.last_pressure_ns = 6 * S, 6 * S
    assert off.budget(s) == 4400


def test_budget_keeps_the_running_sets_predicted_growth_free() -> None:
    """One running request, 10 of a predicted 100 tokens generated, one of one call still
    ahead: (100 − 10) / 2 = 45 tokens to its next stop, plus 20 of its prompt not yet
    prefilled: grow = 65; γ = 3 → the budget is 195 tokens below the free-memory form."""
    kv = SimpleNamespace(num_free_blocks=300, watermark_blocks=10, block_size=16)
    req = SimpleNamespace(
        request_id=7, in_pool=False, num_output_tokens=10, num_tokens=130, num_computed_tokens=110
    )
    pred = Prediction(100.0, (1.0,), (5.0,))
    s = SimpleNamespace(
        kv=kv,
        paused_gpu_blocks=lambda: 50,
        pool=[],
        running={7: req},
        runs={7: SimpleNamespace(pred=pred, k=0)},
        last_pressure_ns=-1,
        _now=0,
    )
    assert running_growth(s) == 65.0
    b = DynamicBudget(b_min=384, b_max=8192, reserve=1000, growth_factor=3.0)
    assert b.budget(s) == (300 - 10) * 16 + 50 * 16 - 3 * 65 - 1000


def _tight(rs, cooldown_ns: int, num_blocks: int):
    s = make("augserve", num_blocks=num_blocks, budget_cooldown_ns=cooldown_ns)
    rec, _ = run(rs, s)
    return rec, s.augmentation


def test_pressure_is_noted_on_preemption_and_never_without() -> None:
    """A cache too small for the burst: preemptions/reclaims engage the fallback; a cache
    that never runs out never does, and its run equals the one without the fallback."""
    rng = np.random.default_rng(3)
    n = 24
    specs = [spec((int(rng.integers(20, 60)), 30.0, 20), final=40) for _ in range(n)]
    rs = workload(np.sort(rng.uniform(0, 0.05, n)), [200] * n, specs)
    _, aug = _tight(rs, 10 * S, num_blocks=60)
    assert aug.last_pressure_ns >= 0
    assert aug.fallback_steps > 0
    a, roomy = _tight(rs, 10 * S, num_blocks=5000)
    b, _ = _tight(rs, 0, num_blocks=5000)
    assert roomy.last_pressure_ns == -1
    assert roomy.fallback_steps == 0
    np.testing.assert_array_equal(a.finish_ns, b.finish_ns)
    np.testing.assert_array_equal(a.first_token_ns, b.first_token_ns)


def _grid_cell(policy: str, model: str, gpu: str, tp: int, rate: float) -> dict:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
    import robustness_grid as rg

    from tidal.experiments.grid import apply_cell

    data = apply_cell(
        rg.augserve_base(model, gpu, tp, rate, 600.0), {"augment.serving_policy": policy}
    )
    data["seed"] = 0
    return data


def test_kv_bound_70b_at_tp2_holds_the_throughput_guarantee() -> None:
    """The grid's worst cell: Llama-3.1-70B at TP 2 on A100-80GB (a 23k-token KV cache) at
    0.52 req/s. Without the growth term and the fallback the dynamic budget's admission waves
    end in preemptions: 0.24 vs INFERCEPT's 0.285 effective req/s (P99 TTFT 61 s vs 11 s, on
    the corrected roofline). With them AugServe holds the throughput half (0.30); the P99
    half does not hold here (27 s): at this rate INFERCEPT itself preempts (BENCHMARKS,
    issue 18)."""
    m = {
        p: run_simulation(load_config(_grid_cell(p, "llama-3.1-70b", "a100-80gb", 2, 0.52)))
        for p in ("augserve", "infercept")
    }
    aug, inf = m["augserve"].metrics, m["infercept"].metrics
    assert aug["effective_throughput"] >= 0.99 * inf["effective_throughput"]
    assert aug["num_preemptions"] <= 2 * inf["num_preemptions"]


@pytest.mark.parametrize(("policy", "budget"), [("infercept", 384), ("vllm", 2048)])
def test_a_dumped_config_keeps_the_bundles_static_budget(policy: str, budget: int) -> None:
    """Sweep cells and run directories store the config with every field set; the bundle's
    static budget must survive the round trip (it became scheduler.token_budget = 8192)."""
    cfg = load_config(_grid_cell(policy, "gpt-j-6b", "a100-80gb", 1, 2.0))
    cfg.workload.num_requests = 40
    again = load_config(cfg.model_dump(mode="json"))
    for c in (cfg, again):
        assert run_simulation(c).metrics["token_budget_mean"] == budget
    explicit = cfg.model_copy(update={"scheduler": cfg.scheduler.model_copy()})
    explicit.scheduler.token_budget = 1024
    assert run_simulation(explicit).metrics["token_budget_mean"] == 1024
