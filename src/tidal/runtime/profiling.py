"""Profiling the real engine's step times over a grid of batch shapes (for ``tidal calibrate``).

Each grid point is a small workload replayed through the engine's own loop
(:meth:`~tidal.runtime.driver.EngineDriver.replay`), so a sample's time includes everything the
simulator's step duration stands for: scheduling, input preparation, the forward pass,
sampling, the scheduler's update and the loop around them. Every step is a sample
``(shape, period)``; the grid is chosen so that the samples span the shapes serving produces:

* **decode**: B requests of context L, prefilled together, then decoding — pure-decode steps
  with n = B and Σctx ≈ B·L for B up to ``max_batch`` and L up to ``max_ctx``;
* **prefill**: one prompt of P tokens in one chunk, and long prompts split into chunks that
  attend growing cached context (the ``prefill_attn`` and ``prefill_ctx`` features);
* **mixed**: B decoding requests joined by a P-token prompt (chunked prefill next to decodes);
* **idle**: a prefill after the engine sat idle for 5–300 ms (on shared machines memory cools
  down while idle: the first step after a pause is slower; see :mod:`tidal.hardware.profiled`);
* **serving**: Poisson arrivals of requests with varied lengths at a rate that keeps about c
  requests running (Little's law with a preliminary fit of the points above), so that shapes,
  their mix and the machine's state (caches, allocator) are those of steady serving.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from tidal.core.kv import KVBlockManager
from tidal.core.request import Request
from tidal.core.units import NS_PER_S
from tidal.engine.build import build_scheduler
from tidal.engine.ordering import ORDERINGS
from tidal.engine.scheduler import Scheduler, SchedulerConfig
from tidal.hardware.perf import PerfModel, StepShape
from tidal.runtime.config import RuntimeConfig, RuntimeEngine, build_engine
from tidal.runtime.driver import EngineDriver, StepRecord


@dataclass(frozen=True)
class GridPoint:
    kind: str
    """decode | prefill | mixed"""
    batch: int
    """Decoding requests (decode, mixed) or 1."""
    context: int
    """Prompt length of the decoding requests, or of the prefilled prompt."""
    prompt: int = 0
    """Mixed: the joining prompt's length."""
    chunk: int = 0
    """Token budget (0: the config's)."""
    rate: float = 0.0
    """Serving: Poisson arrival rate (req/s)."""
    gap_s: float = 0.0
    """Idle: how long the engine waits before the measured prefill."""
    num_requests: int = 0
    """Serving: requests replayed."""
    prompt_range: tuple[int, int] = (16, 512)
    """Serving: prompt lengths, uniform integers in this inclusive range."""
    output_range: tuple[int, int] = (16, 256)
    """Serving: output lengths, uniform integers in this inclusive range."""


@dataclass(frozen=True)
class StepSample:
    shape: StepShape
    seconds: float
    point: str
    idle_s: float = 0.0
    """Idle time of the engine before the step (its memory cools down meanwhile)."""
    repeat: int = 0
    """The profiling pass it was measured in (the spread between passes is the noise)."""


def default_grid(
    max_batch: int = 128, max_ctx: int = 1024, max_prompt: int = 2048, max_tokens: int = 16384
) -> list[GridPoint]:
    """Decode points with B·L ≤ ``max_tokens`` (their prefill dominates profiling time)."""
    batches = [b for b in (1, 2, 4, 8, 16, 32, 64, 128, 256) if b <= max_batch]
    ctxs = [c for c in (16, 64, 256, 1024, 4096) if c <= max_ctx]
    grid = [GridPoint("decode", b, c) for b in batches for c in ctxs if b * c <= max_tokens]
    prompts = [p for p in (8, 32, 128, 256, 512, 1024, 2048) if p <= max_prompt]
    grid += [GridPoint("prefill", 1, p) for p in prompts]
    grid += [GridPoint("prefill", 1, max_prompt, chunk=c) for c in (128, 512)]
    grid += [
        GridPoint("mixed", b, 128, prompt=p, chunk=256) for b in batches[::2] for p in (64, 512)
    ]
    grid += [GridPoint("idle", 1, p, gap_s=g) for p in (16, 256) for g in IDLE_GAPS_S]
    return grid


IDLE_GAPS_S = (0.005, 0.02, 0.05, 0.1, 0.3)
"""Idle points: a prefill after the engine waited this long (memory and caches cool down)."""


SERVING_PROMPT = (16, 512)
SERVING_OUTPUT = (16, 256)
"""Serving points' lengths: uniform integers in these inclusive ranges."""


def serving_grid(
    prelim: PerfModel,
    concurrencies: tuple[int, ...] = (2, 8, 32),
    max_batch: int = 128,
    prompt_range: tuple[int, int] = SERVING_PROMPT,
    output_range: tuple[int, int] = SERVING_OUTPUT,
    token_budget: int = 0,
) -> list[GridPoint]:
    """Poisson points keeping about c requests running: λ = c / (E[output] · t(c)), with t(c)
    the preliminary model's step time at c decodes of mean context plus the arrivals' prefill
    tokens per step (λ·E[prompt]·t, at most the budget's room left by the decodes; a few
    fixed-point iterations). ``prompt_range``/``output_range``/``token_budget`` let the points
    match a workload's lengths and chunking (``tidal calibrate --serving-prompt-len …``);
    ``token_budget`` 0 keeps the profiling engine's (large) budget."""
    p_mean = sum(prompt_range) / 2
    o_mean = sum(output_range) / 2
    points = []
    for c in (c for c in concurrencies if c <= max_batch):
        if token_budget and c >= token_budget:
            continue
        ctx = int(c * (p_mean + o_mean / 2))
        t = prelim.step_seconds(c, ctx, 0, 0, 0, 0)
        for _ in range(5):
            rate = c / (o_mean * t)
            pf = int(rate * t * p_mean)
            if token_budget:
                pf = min(pf, token_budget - c)
            # a chunk of pf tokens after ~half a prompt's context (chunked prefill)
            pctx = int(min(p_mean / 2, p_mean - pf)) if token_budget else 0
            attn = pf * (2 * pctx + pf)
            t = prelim.step_seconds(c, ctx, pf, attn, pctx + pf, 1 if pf else 0)
        rate = c / (o_mean * t)
        points.append(
            GridPoint(
                "serving",
                c,
                0,
                chunk=token_budget,
                rate=rate,
                num_requests=4 * c + 16,
                prompt_range=prompt_range,
                output_range=output_range,
            )
        )
    return points


def _point_requests(pt: GridPoint, decode_steps: int, rng: np.random.Generator) -> list[Request]:
    def req(i: int, prompt: int, out: int, t_ns: int = 0) -> Request:
        ids = rng.integers(0, 256, prompt).tolist()
        return Request(i, t_ns, prompt, out, token_ids=ids)

    if pt.kind == "decode":
        return [req(i, pt.context, decode_steps + 1) for i in range(pt.batch)]
    if pt.kind == "prefill":
        return [req(0, pt.context, 1)]
    if pt.kind == "idle":  # a short request, then the measured one once the engine idled
        first = req(0, 16, 2)
        return [first, req(1, pt.context, 1, t_ns=round((0.015 + pt.gap_s) * NS_PER_S))]
    if pt.kind == "serving":
        gaps = rng.exponential(1.0 / pt.rate, pt.num_requests)
        gaps[0] = 0.0
        times = np.round(np.cumsum(gaps) * NS_PER_S).astype(np.int64).tolist()
        (plo, phi), (olo, ohi) = pt.prompt_range, pt.output_range
        prompts = rng.integers(plo, phi + 1, pt.num_requests)
        outputs = rng.integers(olo, ohi + 1, pt.num_requests)
        return [
            req(i, int(p), int(o), t)
            for i, (p, o, t) in enumerate(zip(prompts, outputs, times, strict=True))
        ]
    # mixed: decoders first, the prompt arrives once they decode (after their prefill)
    decs = [req(i, pt.context, 4 * decode_steps) for i in range(pt.batch)]
    late = req(pt.batch, pt.prompt, 2, t_ns=NS_PER_S // 1000)
    return [*decs, late]


def profile(
    cfg: RuntimeConfig,
    grid: list[GridPoint],
    repeats: int = 3,
    decode_steps: int = 8,
    seed: int = 0,
    progress: Callable[[int, int], None] | None = None,
    clock: str = "wall",
) -> list[StepSample]:
    """Replay every grid point ``repeats`` times on a fresh engine built from ``cfg`` (its
    token budget and running cap raised to fit the grid), after a short warm-up. Each pass
    visits the points in a new random order, so that a drift of the machine's speed during
    profiling (other tenants, turbo) spreads over all shapes instead of biasing some."""
    need_seqs = max(pt.batch + 1 for pt in grid)
    budget = max(cfg.token_budget, need_seqs, max(pt.context for pt in grid))
    base = cfg.model_copy(update={"max_seqs": max(cfg.max_seqs, need_seqs), "token_budget": budget})
    rt = build_engine(base)
    rng = np.random.default_rng(seed)
    warm_up(rt, clock)
    samples: list[StepSample] = []
    total = len(grid) * repeats
    done = 0
    for rep in range(repeats):
        for i in rng.permutation(len(grid)):
            pt = grid[i]
            chunk = max(pt.chunk or budget, pt.batch + 1)
            rt.engine.scheduler = _scheduler(base, rt.kv, chunk)
            reqs = _point_requests(pt, decode_steps, rng)
            steps: list[StepRecord] = []
            EngineDriver(rt).replay(reqs, steps=steps, clock=clock)
            label = f"{pt.kind}:b{pt.batch}:c{pt.context}:p{pt.prompt}:k{pt.chunk}:g{pt.gap_s:g}"
            samples += [
                StepSample(r.shape, r.period_ns / NS_PER_S, label, r.idle_ns / NS_PER_S, rep)
                for r in steps
            ]
            done += 1
            if progress is not None:
                progress(done, total)
    return samples


def warm_up(rt: RuntimeEngine, clock: str = "wall") -> None:
    """A few steps of every kind: first-touch allocations, caches, lazy initialisation."""
    rng = np.random.default_rng(12345)
    reqs = [
        Request(i, 0, p, 8, token_ids=rng.integers(0, 256, p).tolist())
        for i, p in enumerate((16, 64, 200, 400, 32, 8, 128, 256))
    ]
    EngineDriver(rt).replay(reqs, clock=clock)


PROBE_REQUESTS, PROBE_PROMPT, PROBE_OUTPUT = 4, 200, 48


def probe(rt: RuntimeEngine, clock: str = "wall", repeats: int = 3) -> float:
    """A speed reference: mean period (s) of the pure-decode steps of a fixed workload (4
    requests, 200-token prompts, 48 output tokens each), over ``repeats`` replays. Comparing it
    between calibration and a later run measures how much the machine's speed drifted."""
    rng = np.random.default_rng(54321)
    periods: list[int] = []
    for _ in range(repeats):
        reqs = [
            Request(
                i,
                0,
                PROBE_PROMPT,
                PROBE_OUTPUT,
                token_ids=rng.integers(0, 256, PROBE_PROMPT).tolist(),
            )
            for i in range(PROBE_REQUESTS)
        ]
        steps: list[StepRecord] = []
        EngineDriver(rt).replay(reqs, steps=steps, clock=clock)
        periods += [
            r.period_ns
            for r in steps
            if r.shape.num_decodes == PROBE_REQUESTS and not r.shape.prefill_tokens
        ]
    return float(np.mean(periods)) / NS_PER_S


def _scheduler(cfg: RuntimeConfig, kv: KVBlockManager, token_budget: int) -> Scheduler:
    max_seqs = min(cfg.max_seqs, token_budget)
    sc = SchedulerConfig(token_budget, max_seqs, cfg.long_prefill_token_threshold)
    return build_scheduler(sc, kv, cfg.batching, ORDERINGS.get(cfg.ordering)())


def speed_ratio(steps: list[StepRecord], model: PerfModel) -> float:
    """Measured over predicted time of a replay's steps: ``Σ period / Σ t̂(shape)``, with t̂ the
    profile's step time plus its idle penalty (when it has one). The profile's coefficients
    times this ratio predict the same steps' total time exactly: a one-parameter recalibration
    of the machine's current speed, whatever shapes the steps had."""
    if not steps:
        raise ValueError("no steps to compare")
    idle = getattr(model, "idle_penalty_ns", None)
    measured = predicted = 0
    for r in steps:
        measured += r.period_ns
        predicted += model.step_ns(*r.shape)
        if idle is not None and r.idle_ns > 0:
            predicted += idle(r.idle_ns)
    return measured / predicted


def workload_probe(
    rt: RuntimeEngine,
    requests: list[Request],
    model: PerfModel,
    clock: str = "wall",
) -> float:
    """:func:`speed_ratio` of an open-loop replay of ``requests`` on ``rt`` (a held-out sample
    of the workload to be measured, e.g. the same distributions under another seed): how much
    slower (> 1) or faster the machine runs this workload now than the profile predicts."""
    reqs = [  # fresh copies: a replay appends the generated tokens to token_ids
        Request(r.request_id, r.arrival_ns, r.prompt_len, r.max_output_len, token_ids=r.token_ids)
        for r in requests
    ]
    for r in reqs:
        r.token_ids = list(r.token_ids or ())
    steps: list[StepRecord] = []
    EngineDriver(rt).replay(reqs, steps=steps, clock=clock)
    return speed_ratio(steps, model)
