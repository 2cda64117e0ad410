"""``WorkloadConfig`` → ``RequestSet``.

Steps, in order (each is a small public function):

1. load the trace, or generate ``num_requests`` synthetic requests (first at t = 0) at
   ``rate · rate_scale`` req/s with ``arrival_cv`` (``rate`` unset, i.e. closed loop with
   ``concurrency``, means all at t = 0), lengths from ``length_dist``;
2. :func:`time_window`: keep ``t0 + start_s ≤ t < t0 + end_s`` (t0 = first arrival) and
   re-base so the window start is 0: ``t' = t − (t0 + start_s)`` (with ``start_s = 0`` the
   first arrival stays at 0);
3. :func:`scale_rate`: ``t' = round(t / rate_scale)`` (traces only; synthetic rates and
   ServeGen client rates are multiplied before sampling instead);
4. :func:`first_n`: the first ``max_requests``;
5. :func:`cap_lengths`: ``prompt = min(prompt, max_prompt_len)``,
   ``output = min(output, max_output_len)``.

ServeGen traces get steps 2–4 inside the sampler (:func:`tidal.workload.servegen.load_servegen`)
because sampling 14 days at full rate would be hundreds of millions of requests; its window is
relative to the trace's first window start. ``source`` lists every step that changed something.
The result depends only on the config and the generator's state.
"""

from __future__ import annotations

import math

import numpy as np

from tidal.core.errors import ConfigError
from tidal.core.units import NS_PER_S
from tidal.workload._io import MAX_SPAN_NS
from tidal.workload.arrivals import arrival_times
from tidal.workload.augmented import generate_mixture, parse_types
from tidal.workload.augmented_jsonl import load_augmented_jsonl
from tidal.workload.base import RequestSet
from tidal.workload.config import WorkloadConfig
from tidal.workload.content import PrefixContent
from tidal.workload.lengths import config_lengths
from tidal.workload.measured import load_measured
from tidal.workload.parallel_probe import probe_groups, token_savings
from tidal.workload.servegen import load_servegen
from tidal.workload.sessions import sessions
from tidal.workload.traces import detect_format, load_azure, load_mooncake


def _with(rs: RequestSet, idx: np.ndarray | slice, note: str) -> RequestSet:
    sub = rs.take(idx)
    return RequestSet(
        sub.arrival_ns,
        sub.prompt_len,
        sub.output_len,
        f"{rs.source}; {note}",
        sub.extra,
        sub.payloads,
        sub.content,
    )


def _offset_ns(seconds: float) -> int:
    """Seconds → ns, clipped to :data:`MAX_SPAN_NS` (a window edge past every trace time)."""
    return MAX_SPAN_NS if seconds * NS_PER_S >= MAX_SPAN_NS else round(seconds * NS_PER_S)


def time_window(rs: RequestSet, start_s: float, end_s: float | None) -> RequestSet:
    """Requests in ``[t0 + start_s, t0 + end_s)``, times re-based to the window start."""
    if len(rs) == 0 or (start_s == 0 and end_s is None):
        return rs
    t0 = int(rs.arrival_ns[0])
    lo = t0 + _offset_ns(start_s)
    i = int(np.searchsorted(rs.arrival_ns, lo, side="left"))
    j = len(rs)
    if end_s is not None:
        j = int(np.searchsorted(rs.arrival_ns, t0 + _offset_ns(end_s), side="left"))
    end = "end" if end_s is None else f"{end_s:g}"
    out = _with(rs, slice(i, j), f"window [{start_s:g}, {end}) s")
    return RequestSet(
        out.arrival_ns - lo,
        out.prompt_len,
        out.output_len,
        out.source,
        out.extra,
        out.payloads,
        out.content,
    )


def scale_rate(rs: RequestSet, rate_scale: float) -> RequestSet:
    """Timestamps divided by ``rate_scale`` (rounded to the ns): the rate is multiplied."""
    if rate_scale == 1.0:
        return rs
    t = rs.arrival_ns / rate_scale
    if len(t) and t[-1] - t[0] > MAX_SPAN_NS:
        raise ConfigError(
            "workload.rate_scale",
            f"rate_scale {rate_scale:g} stretches the trace to {(t[-1] - t[0]) / NS_PER_S:.3g} s, "
            f"beyond the {MAX_SPAN_NS / NS_PER_S:.3g} s a run may span",
            "raise rate_scale or select a shorter window (end_s, --end-s)",
        )
    t = np.rint(t).astype(np.int64)
    return RequestSet(
        t,
        rs.prompt_len,
        rs.output_len,
        f"{rs.source}; rate x{rate_scale:g}",
        rs.extra,
        rs.payloads,
        rs.content,
    )


def first_n(rs: RequestSet, n: int | None) -> RequestSet:
    if n is None or n >= len(rs):
        return rs
    return _with(rs, slice(0, n), f"first {n}")


def cap_lengths(rs: RequestSet, max_prompt: int | None, max_output: int | None) -> RequestSet:
    notes, prompt, output = [], rs.prompt_len, rs.output_len
    if max_prompt is not None and prompt.size and prompt.max() > max_prompt:
        prompt = np.minimum(prompt, max_prompt)
        notes.append(f"prompt ≤ {max_prompt}")
    if max_output is not None and output.size and output.max() > max_output:
        output = np.minimum(output, max_output)
        notes.append(f"output ≤ {max_output}")
    if not notes:
        return rs
    content = rs.content
    if content is not None and prompt is not rs.prompt_len:
        content = content.truncate(prompt)
    source = "; ".join([rs.source, *notes])
    return RequestSet(rs.arrival_ns, prompt, output, source, rs.extra, content=content)


def synthetic(cfg: WorkloadConfig, rng: np.random.Generator) -> RequestSet:
    """``num_requests`` arrivals (first at 0) and lengths, rate multiplied by ``rate_scale``."""
    n = cfg.num_requests or 0
    rate = math.inf if cfg.rate is None else cfg.rate * cfg.rate_scale
    arrivals = arrival_times(n, rate, cfg.arrival_cv, rng)
    prompt, output = config_lengths(cfg, n, rng)
    content = None
    groups, shared = cfg.shared_prefix_groups, cfg.shared_prefix_len
    if groups and shared:
        # G system prompts of L tokens, each request's chosen uniformly, then its question.
        group = rng.integers(groups, size=n)
        prompt = prompt + shared
        content = PrefixContent.from_segments(
            group.astype(np.int64), np.full(n, shared, np.int64), np.ones(n, np.int64)
        )
    process = "poisson" if cfg.arrival_cv == 1.0 else f"gamma cv {cfg.arrival_cv:g}"
    lengths = cfg.length_dist
    if not lengths.startswith("empirical:"):
        lengths += f" (prompt {cfg.prompt_len}, output {cfg.output_len})"
    source = f"synthetic: {n} requests, {process} at {rate:g} req/s, lengths {lengths}"
    if content is not None:
        source += f", {groups} shared prefixes of {shared} tokens"
    if cfg.n > 1:
        rs = parallel_branches(
            RequestSet(arrivals, prompt, output, source, content=content), cfg, rng
        )
        return RequestSet(
            rs.arrival_ns,
            rs.prompt_len,
            rs.output_len,
            f"{source}; {rs.source}",
            content=rs.content,
        )
    return RequestSet(arrivals, prompt, output, source, content=content)


def parallel_branches(rs: RequestSet, cfg: WorkloadConfig, rng: np.random.Generator) -> RequestSet:
    """Each request becomes ``cfg.n`` branches: same arrival and prompt (its content, then a
    question id of its own, shared by the branches), outputs drawn again per branch."""
    n, k = len(rs), cfg.n
    _, output = config_lengths(cfg, n * k, rng)
    shared = cfg.shared_prefix_len if rs.content is not None else 0
    base = 1 << 41  # question ids, apart from the system prompts' group ids
    if rs.content is not None:
        ids = np.stack([rs.content.ids, base + np.arange(n)], axis=1)
        lens = np.stack([np.full(n, shared), rs.prompt_len - shared], axis=1)
    else:
        ids, lens = (base + np.arange(n))[:, None], rs.prompt_len[:, None]
    segs = np.repeat(np.arange(n), k)
    content = PrefixContent.from_segments(
        ids[segs].ravel(), lens[segs].ravel(), np.full(n * k, ids.shape[1], np.int64)
    )
    source = f"parallel sampling n = {k} (all branches to completion)"
    if cfg.branch_policy == "parallel-probe":
        full = output.reshape(n, k)
        done = probe_groups(full, cfg.parallel_probe, rng)
        seq, tot = token_savings(full, done)
        output = done.ravel()
        source = (
            f"parallel sampling n = {k} (Parallel-Probe: {seq:.1%} sequential, "
            f"{tot:.1%} total decode tokens saved)"
        )
    return RequestSet(rs.arrival_ns[segs], rs.prompt_len[segs], output, source, content=content)


def _servegen(cfg: WorkloadConfig, rng: np.random.Generator) -> RequestSet:
    assert cfg.trace is not None
    rs = load_servegen(
        cfg.trace,
        rng,
        start_s=cfg.start_s,
        end_s=cfg.end_s,
        rate_scale=cfg.rate_scale,
        max_requests=cfg.first_requests,
    )
    end = "end" if cfg.end_s is None else f"{cfg.end_s:g}"
    note = f"window [{cfg.start_s:g}, {end}) s, client rates x{cfg.rate_scale:g}"
    if cfg.first_requests is not None:
        note += f", first {cfg.first_requests}"
    return RequestSet(rs.arrival_ns, rs.prompt_len, rs.output_len, f"{rs.source}; {note}", rs.extra)


def _augmented(cfg: WorkloadConfig, rng: np.random.Generator) -> RequestSet:
    """Augmented workloads (:mod:`tidal.workload.augmented`): generated or a JSONL file; the
    time window and ``max_requests`` apply, length caps do not (use ``max_context``)."""
    name = cfg.augmented
    assert name is not None
    if name.startswith("augmented:"):
        rs = load_augmented_jsonl(
            name.split(":", 1)[1],
            rng,
            rate=cfg.rate,
            num_requests=cfg.num_requests,
            rate_scale=cfg.rate_scale,
            arrival_cv=cfg.arrival_cv,
            max_context=cfg.max_context,
        )
    else:
        assert cfg.num_requests is not None
        assert cfg.rate is not None
        rs = generate_mixture(
            parse_types(name),
            cfg.num_requests,
            cfg.rate * cfg.rate_scale,
            rng,
            arrival_cv=cfg.arrival_cv,
            call_time_dist=cfg.call_time_dist,
            max_context=cfg.max_context,
        )
    rs = time_window(rs, cfg.start_s, cfg.end_s)
    return first_n(rs, cfg.max_requests)


def _check_mooncake_keys(cfg: WorkloadConfig, fmt: str) -> None:
    """``hash_block_tokens`` and ``spread_ticks`` shape a Mooncake trace only: on another
    format they are refused, not ignored: a setting that changes nothing must not look as if
    it did."""
    if fmt == "mooncake":
        return
    default = WorkloadConfig.model_fields["hash_block_tokens"].default
    for key, given in (
        ("hash_block_tokens", cfg.hash_block_tokens != default),
        ("spread_ticks", cfg.spread_ticks),
    ):
        if given:
            raise ConfigError(
                f"workload.{key}",
                f"applies to Mooncake traces only, and {cfg.trace} is a {fmt} trace",
                "remove it",
            )


def build_workload(cfg: WorkloadConfig, rng: np.random.Generator) -> RequestSet:
    """The request set described by ``cfg`` (module docstring gives the order of the steps)."""
    if cfg.augmented is not None:
        return _augmented(cfg, rng)
    if cfg.trace is None and cfg.turns > 1:
        rs = sessions(cfg, rng)
    elif cfg.trace is None:
        rs = synthetic(cfg, rng)
        rs = time_window(rs, cfg.start_s, cfg.end_s)
    else:
        fmt = detect_format(cfg.trace) if cfg.trace_format == "auto" else cfg.trace_format
        _check_mooncake_keys(cfg, fmt)
        if fmt == "servegen":
            rs = _servegen(cfg, rng)
        else:
            if fmt == "azure":
                rs = load_azure(cfg.trace)
            elif fmt == "measured":
                rs = load_measured(cfg.trace)
            else:
                rs = load_mooncake(
                    cfg.trace,
                    spread_ticks=cfg.spread_ticks,
                    rng=rng,
                    hash_block_tokens=cfg.hash_block_tokens,
                )
            rs = time_window(rs, cfg.start_s, cfg.end_s)
            rs = scale_rate(rs, cfg.rate_scale)
    rs = first_n(rs, cfg.first_requests if cfg.trace is not None else cfg.max_requests)
    return cap_lengths(rs, cfg.max_prompt_len, cfg.max_output_len)
