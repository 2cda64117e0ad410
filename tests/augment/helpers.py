"""Factories for augmented-request tests."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from tests.conftest import unit_perf
from tidal.augment.bundles import AugmentSpec, build_augmented_scheduler
from tidal.augment.env import AugmentEnv
from tidal.augment.waste import IterationProfile
from tidal.batching.eb_options import EBOptions
from tidal.core.augmented import AugmentedSpec, ToolCall
from tidal.core.kv import KVBlockManager
from tidal.core.prefix_cache import PrefixCachingKVManager
from tidal.engine.scheduler import Scheduler, SchedulerConfig
from tidal.hardware.gpus import get_gpu
from tidal.hardware.interference import step_costs
from tidal.hardware.models import get_model
from tidal.sim.instance import SimInstance
from tidal.sim.recorder import RequestRecorder
from tidal.sim.simulator import Simulation
from tidal.workload.augmented import request_set_of
from tidal.workload.base import RequestSet

MS = 1_000_000
US = 1_000


def env(perf=None, swap_ns_per_token: float = 1000.0) -> AugmentEnv:
    """unit_perf (1 ms + 1 µs per token) and 1 µs per swapped token, N_sat = 64."""
    perf = perf or unit_perf()
    return AugmentEnv(perf, IterationProfile.from_perf(perf, 64), swap_ns_per_token, 1000)


def spec(*segments: tuple[int, float, int], final: int, tool: int = 6) -> AugmentedSpec:
    """``spec((g, call_ms, a), ..., final=g_K)``."""
    return AugmentedSpec(tuple(ToolCall(g, round(t * MS), a) for g, t, a in segments), final, tool)


def workload(arrivals_s, prompts, specs) -> RequestSet:
    t = (np.asarray(arrivals_s, dtype=np.float64) * 1e9).round().astype(np.int64)
    return request_set_of(t, list(prompts), list(specs), "test")


def make(
    policy: str = "infercept",
    *,
    num_blocks: int = 2000,
    block_size: int = 16,
    host_blocks: int = 10_000,
    token_budget: int = 512,
    max_seqs: int = 64,
    watermark: float = 0.0,
    checked: bool = True,
    perf=None,
    swap_ns_per_token: float = 1000.0,
    batching: str = "mb",
    deployment: tuple[str, str, int] = ("gpt-j-6b", "a100-80gb", 1),
    eb: EBOptions | None = None,
    prefix_caching: bool = False,
    host_tier: int = 0,
    **kw,
) -> Scheduler:
    """``batching`` other than mb needs EB's step costs: those of ``perf`` (default
    unit_perf) for the ``deployment`` (model, GPU, TP). ``host_tier``: blocks of the prefix
    cache's host tier, loaded at the swap link's speed (``block_size × swap_ns_per_token``
    per block)."""
    kv: KVBlockManager
    if prefix_caching:
        load_ns = block_size * swap_ns_per_token
        kv = PrefixCachingKVManager(
            num_blocks, block_size, watermark, host_blocks, host_tier, load_ns
        )
    else:
        assert not host_tier, "a host tier needs the prefix cache"
        kv = KVBlockManager(num_blocks, block_size, watermark, host_blocks)
    m, g, tp = deployment
    costs = step_costs(get_model(m), get_gpu(g), tp, perf or unit_perf())
    s = build_augmented_scheduler(
        SchedulerConfig(max(token_budget, max_seqs), max_seqs, costs=costs, eb=eb or EBOptions()),
        kv,
        env(perf, swap_ns_per_token),
        AugmentSpec(serving_policy=policy, batching=batching, **kw),
    )
    if checked:
        _check_after_each_step(s)
    return s


def _check_after_each_step(s: Scheduler) -> None:
    """Assert the scheduler's invariants after every applied step (resumes may land while a
    step is in flight, when the running set's counters are mid-step)."""
    update = s.update

    def checked(plan, output, end_ns):
        update(plan, output, end_ns)
        s.check()

    s.update = checked  # type: ignore[method-assign]


def run(rs: RequestSet, sched, perf=None, fast_forward: bool = True):
    inst = SimInstance(0, sched, perf or unit_perf(), fast_forward)
    rec = RequestRecorder(rs)
    sim = Simulation([inst], rs, rec)
    sim.run()
    return rec, sim


@st.composite
def augmented_workloads(
    draw,
    max_requests: int = 12,
    max_gap_s: float = 0.02,
    max_calls: int = 4,
    max_decode: int = 40,
    max_call_ms: float = 30.0,
    max_return: int = 60,
    max_prompt: int = 200,
    max_final: int | None = None,
) -> RequestSet:
    """Random augmented workloads: up to ``max_requests`` requests, each a prompt and up to
    ``max_calls`` (decode, call, returned tokens) segments before a final decode."""
    n = draw(st.integers(1, max_requests))
    arrivals = np.cumsum(draw(st.lists(st.floats(0, max_gap_s), min_size=n, max_size=n)))
    prompts, specs = [], []
    for _ in range(n):
        k = draw(st.integers(0, max_calls))
        segs = [
            (
                draw(st.integers(1, max_decode)),
                draw(st.floats(0, max_call_ms)),
                draw(st.integers(0, max_return)),
            )
            for _ in range(k)
        ]
        specs.append(spec(*segs, final=draw(st.integers(1, max_final or max_decode))))
        prompts.append(draw(st.integers(1, max_prompt)))
    return workload(arrivals, prompts, specs)
