"""Multi-model workloads: the WarmServe artifact's mapping of one trace onto M models
(docs/research/warmserve.md §3.2), with the substitutions this workplace needs.

**Azure mix** (``kind: azure``), after the artifact's ``trace_generator.py``:

1. the total rate ``rate`` (req/s) over an hour is split by a power law:
   share_i = (i+1)^-α / Σ_j (j+1)^-α (model order as given, so the first model is the busiest);
2. each model takes ``n_i = ⌊rate · 3600 · share_i⌋`` requests resampled from the trace: every
   row is replicated ``⌈n_i / rows⌉`` times and ``n_i`` are drawn without replacement;
3. lengths: prompt ``min(1024, ContextTokens)``, output ``min(1023, max(3, GeneratedTokens))``;
4. only the first ``replay_s`` (1200 s) of the merged stream is replayed.

*Substitution.* The artifact gives model i the first hour of day ``(7 − M) + i`` of the 2024
week-long Azure trace, and its forecaster a prior from the same hour of all earlier days. Only
the one-hour 2023 traces exist here. So model i replays the 2023 hour rotated by
``i · 3600 / M`` seconds (``t ↦ (t + φ_i) mod 3600``), which decorrelates the models' bursts as
different days do; and its "earlier days" are further rotations of the same hour (phases drawn
from the run's workload stream), resampled at the model's rate, whose per-window load is scaled
by the day-to-day level of a ServeGen language pool at the same time of day
(``rate(day d, window) / rate(replay day, window)``, pools m-small, m-mid, m-large in turn;
10-minute rates, so two 5-minute windows share a ratio). The prior is the mean over those days,
as in the artifact.

**ServeGen mix** (``kind: servegen``): model i follows the 10-minute aggregate rate of a ServeGen
pool (``servegen_aggregate_rate_10min.csv.gz``), normalised to mean ``rate · share_i``, for
``days`` days; arrivals are Poisson within each window; lengths are drawn from the pool's length
quantiles with the same caps. Data gaps (rate 0) produce no requests. No prior: the forecaster
learns the daily profile online.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import ConfigDict, Field

from tidal.core.errors import ConfigError
from tidal.core.strict import StrictModel
from tidal.core.units import NS_PER_S
from tidal.workload._io import fail_at, float_column, read_bytes, read_csv_strings
from tidal.workload.augmented import cap_context, parse_types, request_set_of, sample_request
from tidal.workload.base import RequestSet
from tidal.workload.concurrency import window_concurrency
from tidal.workload.lengths import quantile_lengths
from tidal.workload.paths import traces_dir
from tidal.workload.servegen import length_quantiles

AGGREGATE_FILE = "servegen/servegen_aggregate_rate_10min.csv.gz"
QUANTILES_FILE = "servegen/servegen_length_quantiles.csv.gz"
SERVEGEN_WINDOW_S = 600.0


class MixConfig(StrictModel):
    model_config = ConfigDict(extra="forbid")

    kind: Literal["azure", "servegen"] = "azure"
    alpha: float = Field(default=0.5, ge=0)
    """Power-law skew of the per-model shares (artifact CLI default 0.5)."""
    rate: float = Field(default=1.0, gt=0)
    """Total request rate over all models, req/s (artifact ``rps``)."""
    hour_s: float = Field(default=3600.0, gt=0)
    replay_s: float = Field(default=1200.0, gt=0)
    """Azure mix: replayed span (artifact: the first 20 minutes)."""
    prompt_cap: int = Field(default=1024, ge=1)
    output_min: int = Field(default=3, ge=1)
    output_cap: int = Field(default=1023, ge=1)
    pools: list[str] = Field(default_factory=lambda: ["m-small", "m-mid", "m-large"])
    """ServeGen pools, assigned to models in turn (history scaling or rate series)."""
    hour_of_day: int = Field(default=0, ge=0, le=23)
    """Azure mix: time of day whose ServeGen levels scale the prior (artifact: 00:00–01:00)."""
    days: float = Field(default=14.0, gt=0, le=14)
    """ServeGen mix: simulated days."""
    window_s: float = Field(default=300.0, gt=0)
    """Forecast window of the prior."""
    augmented: str | None = None
    """Augmented (tool-calling) requests on the mix's arrivals: ``infercept-mix`` or
    ``infercept:TYPE[,TYPE…]`` (:func:`augment_mix`); None: plain requests."""


@dataclass
class MixWorkload:
    requests: RequestSet
    """Merged, time-sorted; ``extra['model']`` is the model index."""
    shares: np.ndarray
    prior_avg: list[np.ndarray] | None
    prior_peak: list[np.ndarray] | None
    """Per model, the forecaster's prior per window (None: learn online)."""
    description: str


def power_law_shares(num_models: int, alpha: float) -> np.ndarray:
    w = (np.arange(num_models) + 1.0) ** (-alpha)
    return w / w.sum()


def read_aggregate_rates(path: Path | None = None) -> dict[str, np.ndarray]:
    """Pool → total req/s per 10-minute window (in window order)."""
    p = path or traces_dir() / AGGREGATE_FILE
    where = str(p)
    df = read_csv_strings(read_bytes(p), where, ["model", "window_start_s", "total_rate_rps"])
    start = float_column(df, "window_start_s", where)
    rate = float_column(df, "total_rate_rps", where)
    name = df["model"].str.strip_chars()
    fail_at(df, (name.is_null() | (name == "")).to_numpy(), where, "model", "expected a model name")
    model = name.to_numpy()
    out = {}
    for m in np.unique(model):
        sel = model == m
        order = np.argsort(start[sel], kind="stable")
        out[str(m)] = rate[sel][order]
    return out


def _caps(prompt: np.ndarray, output: np.ndarray, cfg: MixConfig) -> tuple[np.ndarray, np.ndarray]:
    p = np.minimum(prompt, cfg.prompt_cap).astype(np.int64)
    o = np.minimum(np.maximum(output, cfg.output_min), cfg.output_cap).astype(np.int64)
    return np.maximum(p, 1), o


def _resample(t_s: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """Indices of ``n`` rows drawn without replacement from ``⌈n/rows⌉`` copies of the trace."""
    rows = len(t_s)
    if n <= 0 or rows == 0:
        return np.zeros(0, dtype=np.int64)
    copies = -(-n // rows)
    return rng.choice(rows * copies, size=n, replace=False) % rows


def _merge(parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]], source: str) -> RequestSet:
    t = np.concatenate([p[0] for p in parts]) if parts else np.zeros(0, np.int64)
    pr = np.concatenate([p[1] for p in parts]) if parts else np.zeros(0, np.int64)
    out = np.concatenate([p[2] for p in parts]) if parts else np.zeros(0, np.int64)
    model = np.concatenate([np.full(len(p[0]), i, np.int64) for i, p in enumerate(parts)])
    order = np.argsort(t, kind="stable")
    return RequestSet(t[order], pr[order], out[order], source, {"model": model[order]})


def azure_mix(
    trace: RequestSet,
    service_ms: list[tuple[float, float]],
    cfg: MixConfig,
    rng: np.random.Generator,
    pool_rates: dict[str, np.ndarray] | None = None,
) -> MixWorkload:
    """The artifact's mapping (module docstring) of a one-hour trace onto ``len(service_ms)``
    models; ``service_ms[i]`` = (prefill ms, decode ms/token) for the prior's concurrency."""
    m_count = len(service_ms)
    shares = power_law_shares(m_count, cfg.alpha)
    t_all = trace.arrival_ns / NS_PER_S
    prompt, output = _caps(trace.prompt_len, trace.output_len, cfg)
    hour = cfg.hour_s
    parts = []
    n_models = [int(cfg.rate * hour * shares[i]) for i in range(m_count)]
    for i in range(m_count):
        phase = i * hour / m_count
        idx = _resample(t_all, n_models[i], rng)
        t = np.mod(t_all[idx] + phase, hour)
        keep = t < cfg.replay_s
        t_ns = np.rint(t[keep] * NS_PER_S).astype(np.int64)
        parts.append((t_ns, prompt[idx][keep], output[idx][keep]))
    rs = _merge(
        parts, f"{trace.source}; {m_count}-model Azure mix, rate {cfg.rate:g}, α {cfg.alpha:g}"
    )
    prior_avg = prior_peak = None
    if pool_rates is not None:
        prior_avg, prior_peak = [], []
        n_win = math.ceil(cfg.replay_s / cfg.window_s) + 1
        for i in range(m_count):
            pool = cfg.pools[i % len(cfg.pools)]
            series = pool_rates.get(pool)
            if series is None:
                raise ConfigError(
                    "cluster.mix.pools",
                    f"no ServeGen pool {pool!r}",
                    f"valid: {', '.join(sorted(pool_rates))}",
                )
            day = max(7 - m_count, 1) + i
            avg_days, peak_days = [], []
            for d in range(day):
                ratio = _level_ratio(series, d, day, cfg, n_win)
                if ratio is None:
                    continue
                idx = _resample(t_all, n_models[i], rng)
                t = np.mod(t_all[idx] + rng.random() * hour, hour)
                pre, dec = service_ms[i]
                svc = (pre + output[idx] * dec) / 1000.0
                avg, peak = window_concurrency(t, svc, cfg.window_s, n_win)
                avg_days.append(avg * ratio)
                peak_days.append(peak * ratio)
            if not avg_days:
                raise ConfigError(
                    "cluster.mix",
                    f"pool {pool} has no earlier day with data",
                    "choose another pool or hour_of_day",
                )
            prior_avg.append(np.mean(avg_days, axis=0))
            prior_peak.append(np.mean(peak_days, axis=0))
    desc = (
        f"Azure mix of {m_count} models (shares {np.round(shares, 3).tolist()}), "
        f"{len(rs)} requests in {cfg.replay_s:g} s"
    )
    return MixWorkload(rs, shares, prior_avg, prior_peak, desc)


def _level_ratio(
    series: np.ndarray, day: int, replay_day: int, cfg: MixConfig, n_win: int
) -> np.ndarray | None:
    per_day = round(86400 / SERVEGEN_WINDOW_S)
    start = cfg.hour_of_day * 3600.0
    k = (start + np.arange(n_win) * cfg.window_s) // SERVEGEN_WINDOW_S
    k = np.minimum(k.astype(np.int64), per_day - 1)
    a = series[day * per_day + k]
    b = series[(replay_day % (len(series) // per_day)) * per_day + k]
    if np.any(a <= 0) or np.any(b <= 0):
        return None
    return a / b


def servegen_model_rates(
    cfg: MixConfig, num_models: int, rates: dict[str, np.ndarray]
) -> list[tuple[str, np.ndarray]]:
    """Per model: its pool and its Poisson rate per 10-minute window, the pool's series (first
    ``days`` of it) normalised to mean ``rate · share_i`` over its positive windows."""
    shares = power_law_shares(num_models, cfg.alpha)
    n_win = round(cfg.days * 86400 / SERVEGEN_WINDOW_S)
    out = []
    for i in range(num_models):
        pool = cfg.pools[i % len(cfg.pools)]
        if pool not in rates:
            raise ConfigError(
                "cluster.mix.pools",
                f"no ServeGen pool {pool!r}",
                f"valid: {', '.join(sorted(rates))}",
            )
        series = rates[pool][:n_win]
        positive = series[series > 0]
        lam = series / positive.mean() * cfg.rate * shares[i] if len(positive) else series * 0
        out.append((pool, lam))
    return out


def servegen_mix(
    cfg: MixConfig,
    num_models: int,
    rng: np.random.Generator,
    pool_rates: dict[str, np.ndarray] | None = None,
    quantiles: Path | None = None,
) -> MixWorkload:
    """Model i follows pool ``pools[i % len]``'s 10-minute rate series (module docstring)."""
    rates = pool_rates if pool_rates is not None else read_aggregate_rates()
    qfile = quantiles or traces_dir() / QUANTILES_FILE
    shares = power_law_shares(num_models, cfg.alpha)
    parts = []
    for pool, lam in servegen_model_rates(cfg, num_models, rates):
        counts = rng.poisson(lam * SERVEGEN_WINDOW_S)
        start = np.repeat(np.arange(len(lam)) * SERVEGEN_WINDOW_S, counts)
        t = start + rng.random(len(start)) * SERVEGEN_WINDOW_S
        table = length_quantiles(pool, qfile)
        n = len(t)
        prompt = quantile_lengths(*table["input_tokens"], n, rng)
        output = quantile_lengths(*table["output_tokens"], n, rng)
        prompt, output = _caps(prompt, output, cfg)
        parts.append((np.rint(t * NS_PER_S).astype(np.int64), prompt, output))
    rs = _merge(
        parts, f"ServeGen mix ({', '.join(cfg.pools)}), {cfg.days:g} days, rate {cfg.rate:g}"
    )
    desc = f"ServeGen mix of {num_models} models, {len(rs)} requests over {cfg.days:g} days"
    return MixWorkload(rs, shares, None, None, desc)


def augment_mix(
    rs: RequestSet, kinds: str, rng: np.random.Generator, max_context: int
) -> RequestSet:
    """Agentic multi-model traffic: each request of the mix keeps its arrival time and model
    and gets an INFERCEPT-type structure (prompt, decode segments, calls; types drawn
    uniformly, :mod:`tidal.workload.augmented`) instead of the trace's lengths, capped to
    ``max_context``. The trace gives the arrival process per model, INFERCEPT the request."""
    types = parse_types(kinds)
    which = rng.integers(0, len(types), size=len(rs))
    prompts, specs = [], []
    for i in range(len(rs)):
        p, s = sample_request(types[int(which[i])], rng)
        p, s = cap_context(p, s, max_context)
        prompts.append(p)
        specs.append(s)
    out = request_set_of(rs.arrival_ns, prompts, specs, f"{rs.source}; {kinds} requests")
    out.extra.update({k: v for k, v in rs.extra.items() if k not in out.extra})
    return out
