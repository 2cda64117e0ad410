"""A step-time model fitted to measured steps of the real engine (``tidal calibrate``).

Step time is linear in a few features of the batch shape (:class:`~tidal.hardware.perf.StepShape`)
that follow the runner's work (docs/DESIGN.md §5, "calibrated profile from the real engine"):

    t = max(0, c₀ + c_tok·T + Σ_k c_k·max(0, T − knot_k) + c_dec·n + c_dbatch·[n > 0]
               + c_chunk·m + c_pattn·A + c_pctx·C) + c_dctx·Σctx

plus, for the first step after the engine sat idle for g seconds, an idle penalty

    p(g) = max(0, c_idle·g + Σ_j c_j·max(0, g − g_j))

with T = decode + prefill tokens (matmuls), n decode requests (per-request work: input
preparation, sampling, the decode kernel's per-request merge), m prefill chunks (one attention
call each), A = Σ c(2s + c) over chunks (causal attention), C = Σ (s + c) (reading a chunk's
context), Σctx the decode requests' attended context (the decode kernel reads each block once), and
[n > 0] the fixed cost of the decode kernel's launch (a step with any decode runs ~12 more
tensor operations per layer: gather, scores, the split-K merge; measured ≈ 1.5 ms per step
for tiny-llama on this CPU, which ``c₀`` alone would charge to prefill-only steps too).
Hinges at the token knots let the per-token cost fall as matmuls get larger (a concave,
piecewise-linear function of T), as CPU matmul efficiency does. The idle penalty is what a
shared virtual machine does to an idle process: its memory is paged out or evicted from the
host's caches while it waits (here ~+2 ms after 10 ms idle, ~+10 ms after 100 ms, for a
24 MB model), so the first step after a pause re-fetches it.

Exactness (:mod:`tidal.hardware.perf`): only ``decode_ctx`` may be an array; everything else is a
Python float computed identically for a scalar step and a vectorised run, and the array enters
through one multiply and one add, so ``decode_run_ns`` equals step-by-step ``step_ns`` bit for bit.

The fit (:func:`fit_profile`) minimises squared *relative* error by iteratively reweighted least
squares (weights 1/t̂², t̂ the current prediction, so the estimate stays the conditional mean of
the measured times, which is what a request's TPOT averages), with non-negative coefficients
except the hinges (non-positive): a negative per-token or per-context cost has no physical
meaning and only fits noise.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tidal.core.bounded import read_bytes
from tidal.core.errors import ConfigError, TraceError
from tidal.hardware.perf import PerfModel, StepShape

FEATURES = ("const", "tokens", "decodes", "prefill_chunks", "prefill_attn", "prefill_ctx")
"""Scalar features in coefficient order; then one hinge per knot, then ``decode_ctx``, then the
optional ``decode_batch`` (profiles written before it load with 0)."""
OPTIONAL = ("decode_batch",)
DEFAULT_KNOTS = (32, 256)
IDLE_KNOTS_S = (0.02, 0.1)
"""Idle penalty: slope in the idle time g, then hinges at these g (seconds)."""
IDLE_NAMES = ("idle", *(f"idle_after_{round(k * 1000)}ms" for k in IDLE_KNOTS_S))
FORMAT = "tidal-profile/1"


class ProfiledPerfModel(PerfModel):
    name = "profile"

    def __init__(
        self,
        coef: dict[str, float],
        knots: Sequence[int] = DEFAULT_KNOTS,
        source: str = "",
        info: dict[str, Any] | None = None,
    ) -> None:
        self.knots = tuple(int(k) for k in knots)
        names = [*FEATURES, *(f"hinge_{k}" for k in self.knots), "decode_ctx"]
        missing = [n for n in names if n not in coef]
        if missing:
            raise ValueError(f"profile coefficients missing: {', '.join(missing)}")
        self.coef = {n: float(coef[n]) for n in names}
        self.coef.update({n: float(coef.get(n, 0.0)) for n in (*OPTIONAL, *IDLE_NAMES)})
        self.source = source
        self.info = info or {}
        c = self.coef
        self._c0, self._tok, self._dec = c["const"], c["tokens"], c["decodes"]
        self._chunk, self._pattn, self._pctx = (
            c["prefill_chunks"],
            c["prefill_attn"],
            c["prefill_ctx"],
        )
        self._hinges = [(k, c[f"hinge_{k}"]) for k in self.knots]
        self._dctx = c["decode_ctx"]
        self._dbatch = c["decode_batch"]
        self._idle = [c[n] for n in IDLE_NAMES]

    def step_seconds(
        self,
        num_decodes: int,
        decode_ctx: Any,
        prefill_tokens: int,
        prefill_attn: int,
        prefill_ctx: int,
        num_prefills: int,
        mx: Callable[[Any, Any], Any] = max,
    ) -> Any:
        tokens = num_decodes + prefill_tokens
        if tokens == 0:
            return 0.0
        fixed = self._c0 + self._tok * tokens
        for knot, slope in self._hinges:
            if tokens > knot:
                fixed += slope * (tokens - knot)
        fixed += self._dec * num_decodes + self._chunk * num_prefills
        if num_decodes > 0:
            fixed += self._dbatch
        fixed += self._pattn * prefill_attn + self._pctx * prefill_ctx
        fixed = max(fixed, 0.0)
        return fixed + self._dctx * decode_ctx

    def idle_penalty_seconds(self, idle_s: float) -> float:
        slope, *hinges = self._idle
        p = slope * idle_s
        for knot, c in zip(IDLE_KNOTS_S, hinges, strict=True):
            if idle_s > knot:
                p += c * (idle_s - knot)
        return max(p, 0.0)

    def idle_penalty_ns(self, idle_ns: int) -> int:
        if idle_ns <= 0:
            return 0
        return math.floor(self.idle_penalty_seconds(idle_ns / 1e9) * 1e9 + 0.5)

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "source": self.source, "knots": list(self.knots), **self.coef}

    # ------------------------------------------------------------------ files
    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "knots": list(self.knots),
            "coefficients": self.coef,
            "info": self.info,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any], source: str = "") -> ProfiledPerfModel:
        if data.get("format") != FORMAT:
            raise ValueError(f"not a {FORMAT} file (format: {data.get('format')!r})")
        return cls(data["coefficients"], data["knots"], source, data.get("info"))

    @classmethod
    def load(cls, path: str | Path) -> ProfiledPerfModel:
        p = Path(path)
        if not p.exists():
            raise ConfigError(
                "perf_model", f"profile {p} does not exist", "create it with `tidal calibrate`"
            )
        try:
            return cls.from_json(json.loads(read_bytes(p, max_line=None)), source=str(p))
        except (ValueError, KeyError, TypeError, TraceError) as err:
            raise ConfigError("perf_model", f"{p} is not a valid profile: {err}") from None


# ---------------------------------------------------------------------- fitting
def design_matrix(
    shapes: Sequence[StepShape], knots: Sequence[int], idle_s: Sequence[float] | None = None
) -> np.ndarray:
    """Columns in coefficient order: scalar features, token hinges, ``decode_ctx``,
    ``decode_batch``, idle."""
    s = np.asarray(shapes, dtype=np.float64).reshape(-1, 6)
    nd, dctx, pt, pattn, pctx, npf = s.T
    tokens = nd + pt
    cols = [np.ones_like(nd), tokens, nd, npf, pattn, pctx]
    cols += [np.maximum(tokens - k, 0.0) for k in knots]
    cols.append(dctx)
    cols.append((nd > 0).astype(np.float64))
    g = np.zeros_like(nd) if idle_s is None else np.asarray(idle_s, dtype=np.float64)
    cols += [g, *(np.maximum(g - k, 0.0) for k in IDLE_KNOTS_S)]
    return np.stack(cols, axis=1)


def _signed_nnls(x: np.ndarray, y: np.ndarray, sign: np.ndarray) -> np.ndarray:
    """Least squares with ``sign[j]·coef[j] ≥ 0`` (sign 0: free), by an active-set loop:
    refit without the coefficients that violate their sign until none does."""
    active = np.ones(x.shape[1], dtype=bool)
    while True:
        coef = np.zeros(x.shape[1])
        sol, *_ = np.linalg.lstsq(x[:, active], y, rcond=None)
        coef[active] = sol
        bad = active & (sign * coef < 0)
        if not bad.any():
            return coef
        worst = np.argmin(np.where(bad, sign * coef, np.inf))
        active[worst] = False


def fit_profile(
    shapes: Sequence[StepShape],
    seconds: Sequence[float],
    knots: Sequence[int] = DEFAULT_KNOTS,
    iterations: int = 6,
    idle_s: Sequence[float] | None = None,
) -> tuple[dict[str, float], np.ndarray]:
    """Coefficients by name, and each sample's relative error ``(t̂ − t)/t``. ``idle_s``: the
    idle time before each step (the idle penalty's coefficients stay 0 without it)."""
    x = design_matrix(shapes, knots, idle_s)
    t = np.asarray(seconds, dtype=np.float64)
    if len(t) < x.shape[1]:
        raise ValueError(f"{len(t)} samples cannot determine {x.shape[1]} coefficients")
    sign = np.ones(x.shape[1])
    sign[6 : 6 + len(knots)] = -1.0
    sign[-len(IDLE_KNOTS_S) :] = 0.0  # the idle penalty may bend either way
    if idle_s is None or not np.any(np.asarray(idle_s) > 0):
        x[:, -len(IDLE_NAMES) :] = 0.0  # no idle steps: leave the penalty at 0
    pred = t.copy()
    coef = np.zeros(x.shape[1])
    for _ in range(iterations):
        w = 1.0 / np.maximum(pred, 1e-9)
        coef = _signed_nnls(x * w[:, None], t * w, sign)
        pred = np.maximum(x @ coef, 1e-9)
    names = [*FEATURES, *(f"hinge_{k}" for k in knots), "decode_ctx", *OPTIONAL, *IDLE_NAMES]
    return dict(zip(names, (float(c) for c in coef), strict=True)), (pred - t) / t
