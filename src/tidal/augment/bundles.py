"""Serving policies for augmented requests: named bundles of ordering, intercept handling and
token budget, so that a baseline and the paper's method differ by one flag, and each AugServe
mechanism can be ablated alone (docs/research/augserve.md §4.2).

=====================  ===========  ===========  ==========================
name                   ordering     intercept    token budget
=====================  ===========  ===========  ==========================
vllm                   fcfs         vllm         static 2048
infercept              infercept    infercept    static 384 (N_sat)
augserve               augserve     infercept    dynamic [384, 8192]
augserve-ordering      augserve     infercept    static 384   (ordering only)
augserve-budget        infercept    infercept    dynamic      (budget only)
=====================  ===========  ===========  ==========================

vLLM as INFERCEPT ran it: a call ends the request and its return is a new request (whole context +
returned tokens) at the queue tail; ``max_num_batched_tokens`` static (2048, the spec's [DEF]).
INFERCEPT: min-waste interception, FCFS by original arrival across KV-resident → waiting, one
384-token budget shared by every token kind (its released code, docs/research/augserve.md §2.4).
AugServe keeps INFERCEPT's context handling and replaces the ordering and the budget
(docs/research/augserve.md §3.4).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tidal.augment.budget import DynamicBudget, StaticBudget, TokenBudget
from tidal.augment.component import Augmentation, AugmentEnv
from tidal.augment.intercept import INTERCEPTS
from tidal.augment.ordering import AUGMENT_ORDERINGS, ValueQueue
from tidal.augment.predictor import PREDICTORS
from tidal.core.kv import KVBlockManager
from tidal.core.registry import Registry
from tidal.engine.build import build_scheduler
from tidal.engine.ordering import WaitingQueue
from tidal.engine.scheduler import Scheduler, SchedulerConfig
from tidal.engine.state import EngineState


@dataclass(frozen=True)
class ServingPolicy:
    ordering: str
    intercept: str
    budget: str
    static_budget: int


SERVING_POLICIES: Registry[ServingPolicy] = Registry("serving_policy")
for _name, _policy in (
    ("vllm", ServingPolicy("fcfs", "vllm", "static", 2048)),
    ("infercept", ServingPolicy("infercept", "infercept", "static", 384)),
    ("augserve", ServingPolicy("augserve", "infercept", "dynamic", 384)),
    ("augserve-ordering", ServingPolicy("augserve", "infercept", "static", 384)),
    ("augserve-budget", ServingPolicy("infercept", "infercept", "dynamic", 384)),
):
    SERVING_POLICIES.register(_name)(_policy)


@dataclass(frozen=True)
class AugmentSpec:
    """Everything needed to build the scheduler (plain values; the sim layer fills it from
    its pydantic config)."""

    serving_policy: str = "vllm"
    ordering: str | None = None
    intercept: str | None = None
    token_budget: str | None = None
    static_budget: int | None = None
    budget_min: int = 384
    budget_max: int = 8192
    budget_reserve: int = 1000
    budget_cooldown_ns: int = 600_000_000_000
    """The dynamic budget's memory-pressure fallback window (0: off)."""
    budget_step_ns: int = 0
    """Cap of the dynamic budget: no step longer than this by the iteration profile (0: off;
    :func:`step_capped_max`)."""
    budget_growth: float = 3.0
    """γ: weight of the running set's predicted growth in the dynamic budget (0: off)."""
    predictor: str = "noisy"
    predictor_p: float = 0.8
    predictor_sigma: float = 0.3
    predictor_seed: int = 0
    value_form: str = "memory"
    stage2: bool = True
    starvation_ns: int = 10_000_000_000
    """Anti-starvation threshold τ of the fixed rule (0: off): every request with κ = 0,
    else those whose first token is out (their TTFT is settled)."""
    starvation_fcfs: float = 1.0
    """κ of the FCFS-relative anti-starvation rule (0: the fixed τ rule instead)."""
    starvation_floor_ns: int = 5_000_000_000
    """F of the FCFS-relative rule: promoted at ``ready + κ·W_F + F``."""
    batching: str = "mb"
    """The batching policy under the interception (``BATCHING``: mb, eb, ebplus)."""


def build_augmented_scheduler(
    config: SchedulerConfig, kv: KVBlockManager, env: AugmentEnv, spec: AugmentSpec
) -> Scheduler:
    """The scheduler of ``spec.batching`` with the augmentation of ``spec``."""
    waiting, factory = augmentation_factory(config, env, spec)
    return build_scheduler(config, kv, spec.batching, waiting, factory)


def step_capped_max(env: AugmentEnv, spec: AugmentSpec) -> int:
    """``B_max`` cut to the largest batch whose step, ``It(N) = α·N + γ``, takes no longer than
    ``budget_step_ns``: ``clip(⌊(t − γ)/α⌋, B_min, B_max)``. A chunk that outlasts the TTFT
    SLO makes every request arriving meanwhile miss it (issue 18: Llama-3.1-70B at TP 4 on
    A40, It(8192) ≈ 8.6 s); on INFERCEPT's A100 testbeds the cap is far above 8192."""
    if spec.budget_step_ns <= 0:
        return spec.budget_max
    p = env.profile
    n = int((spec.budget_step_ns / 1e9 - p.gamma_s) / p.alpha_s) if p.alpha_s > 0 else 1 << 30
    return min(max(n, spec.budget_min), spec.budget_max)


def augmentation_factory(
    config: SchedulerConfig, env: AugmentEnv, spec: AugmentSpec
) -> tuple[WaitingQueue, Callable[[EngineState], Augmentation]]:
    """The ready queue of ``spec`` and a factory of its augmentation over an engine state."""
    policy = SERVING_POLICIES.get(spec.serving_policy)
    ordering = spec.ordering or policy.ordering
    intercept = INTERCEPTS.get(spec.intercept or policy.intercept)()
    budget_kind = spec.token_budget or policy.budget
    budget: TokenBudget
    if budget_kind == "dynamic":
        budget = DynamicBudget(
            spec.budget_min,
            step_capped_max(env, spec),
            spec.budget_reserve,
            cooldown_ns=spec.budget_cooldown_ns,
            growth_factor=spec.budget_growth,
        )
    elif budget_kind == "static":
        budget = StaticBudget(spec.static_budget or policy.static_budget)
    else:
        raise ValueError(f"unknown token budget {budget_kind!r} (valid: static, dynamic)")
    waiting: WaitingQueue
    if ordering == "augserve":
        tau = spec.starvation_ns if spec.starvation_ns > 0 else 1 << 62
        waiting = ValueQueue(tau, spec.starvation_fcfs, spec.starvation_floor_ns)
    else:
        waiting = AUGMENT_ORDERINGS.get(ordering)()
    predictor = PREDICTORS.get(spec.predictor)(
        spec.predictor_seed, spec.predictor_p, spec.predictor_sigma
    )

    def factory(state: EngineState) -> Augmentation:
        return Augmentation(
            state,
            env,
            intercept=intercept,
            budget=budget,
            predictor=predictor,
            value_form=spec.value_form,
            stage2=spec.stage2,
        )

    return waiting, factory
