"""ServeGen per-client window statistics → sampled requests.

Input: ``<category>/<model>/chunk-<client>-trace.csv`` files (no header; columns
``window_start_s, rate, cv, pattern, param1, param2``), read from a ``*.tar.gz`` with
:mod:`tarfile` (nothing is extracted to disk), from a directory, or a single file.

Sampling, per (client, window) with ``pattern`` Gamma or Weibull and ``rate > 0``:

- Inter-arrival gaps keep the fitted shape ``k = param1``; the scale is re-derived so the mean
  gap is ``μ = 1/(rate·rate_scale)`` (the fitted ``param2`` describes bursts inside the window
  and does not reproduce the window's ``rate``): Gamma ``θ = μ/k``; Weibull
  ``λ = μ/Γ(1 + 1/k)``. Rows with an empty pattern produce no requests.
- Each window is an independent *stationary* renewal process on its part of ``[start, end)``:
  the first arrival comes after a forward-recurrence time ``U·L`` (L length-biased: Gamma
  ``Gamma(k+1, θ)``; Weibull ``λ·G^{1/k}``, ``G ~ Gamma(1 + 1/k, 1)``), so the expected count in
  a window of length T is exactly ``T·rate·rate_scale`` whatever the CV.
- Arrival times are relative to ``origin + start_s`` where ``origin`` is the first window
  start of the trace (00:00 of day 1 for the released files); they do not start at 0.

Window, rate scale and ``max_requests`` are applied before sampling, and a selection whose
expected size exceeds ``max_expected`` (20 million) is refused with a :class:`ConfigError`.

Lengths: prompt and output are drawn independently by inverse-CDF interpolation in
``servegen_length_quantiles.csv.gz`` for the model pool (the folder name above the chunk files,
e.g. ``m-small``). Prompt = ``input_tokens``, or ``text_tokens + image_tokens`` (mm-image);
output = ``output_tokens``.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tidal.core.errors import ConfigError
from tidal.core.units import NS_PER_S
from tidal.workload._io import float_column, read_bytes, read_csv_strings
from tidal.workload.base import RequestSet
from tidal.workload.lengths import quantile_lengths
from tidal.workload.paths import resolve_trace
from tidal.workload.servegen_table import (  # noqa: F401  (re-exported)
    CHUNK_RE,
    COLUMNS,
    GAMMA,
    MIN_SHAPE,
    NONE,
    PATTERNS,
    WEIBULL,
    ServeGenTable,
    read_servegen,
)

MAX_EXPECTED = 20_000_000
QUANTILES_FILE = "servegen_length_quantiles.csv.gz"
_BATCH = 4_000_000
"""Gap draws per vectorised round (bounds memory to a few hundred MB)."""


# --- sampling arrivals -------------------------------------------------------------------


@dataclass(frozen=True)
class _Rows:
    """Active (client, window) pieces to sample: start (ns from the output origin), length
    (ns), rate (req/s, scaled), kind, shape k, and ln of the gap scale (θ or λ, seconds)."""

    lo_ns: np.ndarray
    len_ns: np.ndarray
    rate: np.ndarray
    kind: np.ndarray
    shape: np.ndarray
    log_scale: np.ndarray
    client: np.ndarray

    def take(self, idx: np.ndarray) -> _Rows:
        return _Rows(*(getattr(self, f)[idx] for f in self.__dataclass_fields__))


def _log_scale(kind: np.ndarray, shape: np.ndarray, rate: np.ndarray) -> np.ndarray:
    """ln θ = ln μ − ln k (Gamma) or ln λ = ln μ − ln Γ(1 + 1/k) (Weibull), μ = 1/rate."""
    uniq, inv = np.unique(shape, return_inverse=True)
    lgam = np.array([math.lgamma(1.0 + 1.0 / k) for k in uniq])[inv.reshape(-1)]
    return -np.log(rate) - np.where(kind == GAMMA, np.log(shape), lgam)


def _draw_gaps(rows: _Rows, idx: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Inter-arrival gaps in seconds for rows ``idx`` (one per entry).

    Weibull draws are computed in log space, ``λ·E^{1/k} = exp(ln λ + ln E / k)`` with
    ``E ~ Exp(1)``, so tiny shapes cannot overflow (an infinite gap is capped by :func:`_to_ns`).
    """
    out = np.empty(len(idx))
    k, log_s = rows.shape[idx], rows.log_scale[idx]
    g = rows.kind[idx] == GAMMA
    w = ~g
    with np.errstate(over="ignore", divide="ignore"):
        out[g] = rng.gamma(k[g], np.exp(log_s[g]))
        out[w] = np.exp(log_s[w] + np.log(rng.standard_exponential(int(w.sum()))) / k[w])
    return out


def _draw_residual(rows: _Rows, rng: np.random.Generator) -> np.ndarray:
    """Forward-recurrence time ``U·L`` of every row (L length-biased, module docstring)."""
    u = rng.random(len(rows.rate))
    out = np.empty(len(rows.rate))
    k, log_s = rows.shape, rows.log_scale
    g = rows.kind == GAMMA
    w = ~g
    with np.errstate(over="ignore", divide="ignore"):
        out[g] = rng.gamma(k[g] + 1.0, np.exp(log_s[g]))
        out[w] = np.exp(log_s[w] + np.log(rng.gamma(1.0 + 1.0 / k[w])) / k[w])
    return u * out


def _to_ns(seconds: np.ndarray, cap_ns: np.ndarray) -> np.ndarray:
    """Seconds → int64 ns, capped at ``cap_ns``; only gaps reaching past the window's end are
    capped, which changes nothing inside the window."""
    with np.errstate(over="ignore"):  # an infinite gap is capped like any long one
        return np.rint(np.minimum(seconds * NS_PER_S, cap_ns)).astype(np.int64)


def _renewal(rows: _Rows, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Stationary renewal arrivals of every row: (times in ns, row index)."""
    cap = rows.len_ns + NS_PER_S
    pos = _to_ns(_draw_residual(rows, rng), cap)
    first = np.flatnonzero(pos < rows.len_ns)
    times, owner = [rows.lo_ns[first] + pos[first]], [first]
    active = first
    while active.size:
        remaining = (rows.len_ns[active] - pos[active]) / NS_PER_S * rows.rate[active]
        m = np.ceil(1.2 * remaining + 4.0 * np.sqrt(remaining) + 2.0).astype(np.int64)
        take = max(int(np.searchsorted(np.cumsum(m), _BATCH, side="right")), 1)
        batch, m = active[:take], m[:take]
        rep = np.repeat(batch, m)
        gaps = _to_ns(_draw_gaps(rows, rep, rng), cap[rep])
        # Per-segment cumulative sums; int64 wrap-around in the global sum cancels exactly.
        cs = np.cumsum(gaps)
        end = np.cumsum(m)
        before = cs[end - m] - gaps[end - m]
        t = pos[rep] + cs - np.repeat(before, m)
        keep = t < rows.len_ns[rep]
        times.append(rows.lo_ns[rep[keep]] + t[keep])
        owner.append(rep[keep])
        pos[batch] = t[end - 1]
        active = np.concatenate([batch[pos[batch] < rows.len_ns[batch]], active[take:]])
    return np.concatenate(times), np.concatenate(owner)


def _active_rows(
    table: ServeGenTable, start_s: float, end_s: float | None, rate_scale: float
) -> _Rows:
    """Pieces of windows inside ``[origin + start_s, origin + end_s)``, ordered by time."""
    lo = np.maximum(table.window_start_s, table.origin_s + start_s)
    hi = table.window_start_s + table.window_s
    if end_s is not None:
        hi = np.minimum(hi, table.origin_s + end_s)
    use = np.flatnonzero((table.kind != NONE) & (table.rate > 0) & (hi > lo))
    use = use[np.argsort(lo[use], kind="stable")]
    rate = table.rate[use] * rate_scale
    base = table.origin_s + start_s
    lo_ns = np.rint((lo[use] - base) * NS_PER_S).astype(np.int64)
    len_ns = np.rint((hi[use] - base) * NS_PER_S).astype(np.int64) - lo_ns
    return _Rows(
        lo_ns,
        len_ns,
        rate,
        table.kind[use],
        table.shape[use],
        _log_scale(table.kind[use], table.shape[use], rate),
        table.client[use],
    )


def expected_count(rows: _Rows) -> np.ndarray:
    return rows.rate * rows.len_ns / NS_PER_S


def _refuse(expected: float, max_expected: int) -> ConfigError:
    return ConfigError(
        "rate_scale",
        f"the selected ServeGen window holds about {expected:,.0f} requests, more than "
        f"{max_expected:,}",
        "lower rate_scale, set end_s (a shorter window) or max_requests",
    )


def sample_arrivals(
    table: ServeGenTable,
    rng: np.random.Generator,
    *,
    start_s: float = 0.0,
    end_s: float | None = None,
    rate_scale: float = 1.0,
    max_requests: int | None = None,
    max_expected: int = MAX_EXPECTED,
) -> tuple[np.ndarray, np.ndarray]:
    """Sorted arrival ns (relative to ``origin + start_s``) and the client of each.

    With ``max_requests`` the windows are sampled in time order, in slabs (groups of window
    starts) whose expected size is a little above what is still missing, until the first N
    arrivals are final (every window that could hold an earlier arrival has been sampled).
    """
    rows = _active_rows(table, start_s, end_s, rate_scale)
    exp = expected_count(rows)
    if max_requests is None:
        if exp.sum() > max_expected:
            raise _refuse(float(exp.sum()), max_expected)
        t, own = _renewal(rows, rng)
        return _sort(t, rows.client[own])
    starts = np.unique(rows.lo_ns)
    slab_of = np.searchsorted(starts, rows.lo_ns)
    cum = np.cumsum(np.bincount(slab_of, weights=exp, minlength=len(starts)))
    t_all, c_all = np.zeros(0, np.int64), np.zeros(0, np.int64)
    first = 0
    while first < len(starts):
        need = max_requests - int(np.count_nonzero(t_all < starts[first]))
        if need <= 0:
            break
        base = float(cum[first - 1]) if first else 0.0
        target = base + 1.1 * need + 5.0 * math.sqrt(need) + 100.0
        last = min(int(np.searchsorted(cum, target)) + 1, len(starts))
        if cum[last - 1] - base > max_expected:
            raise _refuse(float(cum[last - 1] - base), max_expected)
        sel = np.flatnonzero((slab_of >= first) & (slab_of < last))
        t, own = _renewal(rows.take(sel), rng)
        t_all = np.concatenate([t_all, t])
        c_all = np.concatenate([c_all, rows.client[sel][own]])
        first = last
    t, c = _sort(t_all, c_all)
    return t[:max_requests], c[:max_requests]


def _sort(t: np.ndarray, client: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    order = np.argsort(t, kind="stable")
    return t[order], client[order]


# --- lengths -----------------------------------------------------------------------------


def _quantile_file(trace: Path) -> Path:
    folder = trace if trace.is_dir() else trace.parent
    for candidate in (folder / QUANTILES_FILE, folder.parent / QUANTILES_FILE):
        if candidate.exists():
            return candidate
    return resolve_trace(f"servegen/{QUANTILES_FILE}")


def length_quantiles(
    model: str, path: str | os.PathLike[str]
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """``{field: (quantiles, values)}`` of one model in a ``model,field,quantile,value`` CSV."""
    where = str(path)
    df = read_csv_strings(read_bytes(Path(path)), where, ["model", "field", "quantile", "value"])
    q = float_column(df, "quantile", where)
    v = float_column(df, "value", where)
    models = df["model"].to_numpy()
    fields = df["field"].to_numpy()
    out = {}
    for f in np.unique(fields[models == model]):
        sel = np.flatnonzero((models == model) & (fields == f))
        order = np.argsort(q[sel], kind="stable")
        out[str(f)] = (q[sel][order], v[sel][order])
    return out


def sample_lengths(
    model: str | None, quantiles_path: Path, n: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Independent prompt and output lengths from the model's quantile table."""
    table = length_quantiles(model, quantiles_path) if model else {}
    if "output_tokens" not in table:
        raise ConfigError(
            "trace",
            f"no length quantiles for ServeGen model {model!r} in {quantiles_path}",
            "keep the <category>/<model>/ folder names",
        )
    if "input_tokens" in table:
        prompt = quantile_lengths(*table["input_tokens"], n, rng)
    else:
        prompt = quantile_lengths(*table["text_tokens"], n, rng)
        prompt = prompt + quantile_lengths(*table["image_tokens"], n, rng)
    return prompt, quantile_lengths(*table["output_tokens"], n, rng)


def load_servegen(
    path: str | os.PathLike[str],
    rng: np.random.Generator,
    *,
    start_s: float = 0.0,
    end_s: float | None = None,
    rate_scale: float = 1.0,
    max_requests: int | None = None,
    model: str | None = None,
    max_expected: int = MAX_EXPECTED,
) -> RequestSet:
    """Sampled ServeGen requests (module docstring), with a ``client`` extra column.

    ``model`` overrides the pool name used for lengths (default: the folder name).
    """
    table = read_servegen(path)
    t, client = sample_arrivals(
        table,
        rng,
        start_s=start_s,
        end_s=end_s,
        rate_scale=rate_scale,
        max_requests=max_requests,
        max_expected=max_expected,
    )
    pool = model or table.model
    prompt, output = sample_lengths(pool, _quantile_file(Path(table.source)), len(t), rng)
    return RequestSet(
        t, prompt, output, f"servegen:{table.source} (model {pool})", {"client": client}
    )
