"""State-conditioned KV forecast: admit a request only if the running set's projected KV
occupancy, at every future step, stays within the cache with the §2.5 CLT margin.

The paper's memory-safe batch size (``docs/research/ebplus.md`` §2.5, Proposition 3) and our
MB-mode bound (:func:`tidal.batching.eb_theory.mb_safe_n`) are *static* caps on the number of
running requests: they assume the slots are in a typical state (steady state, or a cohort
admitted at once). Closed-loop clients with bounded outputs move in waves, and at a phase
change the running requests are older than anything the estimator's window has seen, so a
static cap is either loose (preemptions) or tight (throughput). This forecast conditions on
what the scheduler already knows about each running request: its token count ``x_i`` (prompt
plus generated tokens) and its age ``g_i`` (generated tokens, so ``O_i > g_i``).

With ``S(t) = P(O > t)`` the empirical survival of the window's output lengths, request i is
still running ``s`` steps ahead with probability ``q_i(s) = S(g_i + s) / S(g_i)`` and then
holds ``x_i + s`` tokens (``+ block_size/2`` for the partly filled last block). The requests are
independent given their ages, so the occupancy ``s`` steps ahead has

    M(s) = Σ_i (x_i + s + b/2)·q_i(s),    V(s) = Σ_i (x_i + s)²·q_i(s)·(1 − q_i(s)),

and a candidate (age ``g = 0`` unless it is a preempted request being resumed) is admitted iff
``M(s) + m_new(s) + z·sqrt(V(s) + v_new(s)) ≤ C`` on a grid of ``s`` covering the longest
output seen, with ``z = sqrt(2·ln(1/ε))`` (the Gaussian tail bound ``exp(−z²/2) = ε``). The
paper's §2.5 form ``σ·sqrt(N·ln(1/ε))`` has ``z = sqrt(ln(1/ε))`` = 2.15 at ε = 0.01, below
even the one-sided 1 % Gaussian quantile (2.33); a static N leaves slack on top of it, but an
admission test that runs the cache at its margin every step needs the tail bound (measured:
H200 decode-heavy, N_max = 1536: 2.5 % of requests preempted with 2.15, 0.15 % with 3.03).
A request older than every sample (``S(g_i) = 0``: the outputs just got longer) is assumed to
run through the whole horizon, so a shift to longer outputs stops admission before the cache
runs out instead of after. New admissions are added to ``M, V`` as they are made; the caller
re-projects the running set whenever it loses a member (the only events that can make room),
which keeps the decision a function of the step's state (exact under fast-forward).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from itertools import islice

import numpy as np
from numpy.typing import ArrayLike

GRID = 48
"""Points of the look-ahead grid ``s`` (0 … longest output, evenly spaced)."""
ROOM_CHUNK = 32
"""First chunk of :meth:`KVForecast.room` (then doubling)."""


def margin_ell(eps: float) -> float:
    """z² = 2·ln(1/ε) of the margin z·σ (ε clipped to [1e-6, 0.5])."""
    return 2.0 * math.log(1.0 / min(max(eps, 1e-6), 0.5))


def _survival(o: np.ndarray, t_max: int) -> np.ndarray:
    """``S(t) = #{O > t} / n`` for t = 0 … t_max + 1."""
    counts = np.bincount(o, minlength=t_max + 2).astype(np.float64)
    return (len(o) - np.cumsum(counts)) / len(o)


class KVForecast:
    def __init__(self, capacity_tokens: int, block_size: int, eps: float) -> None:
        self.capacity = float(capacity_tokens)
        self.half_block = block_size / 2.0
        self.ell = margin_ell(eps)
        """z² of the margin z·σ: the Gaussian tail bound ``exp(−z²/2) = ε``."""
        self.surv: np.ndarray | None = None
        """``S(t) = P(O > t)`` for t = 0 … T + 1 (None until the first estimate)."""
        self.s = np.zeros(1)
        self.mean = np.zeros(1)
        self.var = np.zeros(1)
        self.version = 0
        """Bumped whenever ``S``, ``M`` or ``V`` change (callers may cache :meth:`room`)."""

    @property
    def ready(self) -> bool:
        return self.surv is not None

    def set_outputs(self, outputs: np.ndarray, recent: int = 0) -> None:
        """Rebuild ``S`` and the grid from an output-length sample (the estimator's window, in
        completion order). With ``recent`` > 0, ``S(t) = max(S_window(t), S_recent(t))``, the
        latter from the last ``recent`` outputs: when outputs get longer the window is a
        mixture of the two regimes for a whole window length and admits a cohort of the new,
        longer requests as if most were old, short ones; the recent sample follows the shift
        within one update. When outputs get shorter the window stays the larger (it
        overstates the new occupancy until it turns over: safe)."""
        o = np.asarray(outputs, dtype=np.int64)
        if len(o) == 0:
            return
        t_max = int(o.max())
        self.version += 1
        self.surv = _survival(o, t_max)
        if 0 < recent < len(o):
            self.surv = np.maximum(self.surv, _survival(o[-recent:], t_max))
        self.s = np.unique(np.linspace(0, t_max, GRID).round().astype(np.int64))

    def _q(self, ages: np.ndarray) -> np.ndarray:
        """``q_i(s)`` for every request (rows) and grid step (columns)."""
        surv = self.surv
        assert surv is not None
        last = len(surv) - 1
        idx = np.minimum(ages[:, None] + self.s[None, :], last)
        now = surv[np.minimum(ages, last)]
        q = surv[idx] / np.where(now > 0, now, 1.0)[:, None]
        q[now <= 0] = 1.0  # older than every sample: assume it runs through the horizon
        return q

    def project(self, tokens: ArrayLike, ages: ArrayLike, reserved_tokens: int = 0) -> None:
        """Set ``M(s), V(s)`` from the running set's token counts and ages, plus a constant
        ``reserved_tokens`` held by others (e.g. paused requests' preserved contexts)."""
        self.version += 1
        x = np.asarray(tokens, dtype=np.float64)
        if len(x) == 0:
            self.mean = np.full(len(self.s), float(reserved_tokens))
            self.var = np.zeros(len(self.s))
            return
        # requests of one age share q: aggregate n, Σx, Σx² per distinct age, then
        # M(s) = Σ_u (Σx + n·(s + b/2))·q_u(s),  V(s) = Σ_u (Σx² + 2s·Σx + n·s²)·q_u(s)(1 − q_u(s))
        ages_u, inv = np.unique(np.asarray(ages, dtype=np.int64), return_inverse=True)
        k = len(ages_u)
        n = np.bincount(inv, minlength=k).astype(np.float64)
        sx = np.bincount(inv, weights=x, minlength=k)
        sx2 = np.bincount(inv, weights=x * x, minlength=k)
        q = self._q(ages_u)
        w = q * (1.0 - q)
        s_ = self.s.astype(np.float64)
        # column sums, not ``@``: a BLAS product's summation order depends on the CPU's kernel
        # (results must not), while numpy adds the rows of an axis-0 sum in order
        self.mean = (
            ((sx + n * self.half_block)[:, None] * q).sum(axis=0)
            + s_ * (n[:, None] * q).sum(axis=0)
            + reserved_tokens
        )
        vx2, vx, vn = ((a[:, None] * w).sum(axis=0) for a in (sx2, sx, n))
        self.var = vx2 + 2.0 * s_ * vx + s_ * s_ * vn

    def admit(self, tokens: int, age: int = 0, ell: float | None = None) -> bool:
        """Admit a request holding ``tokens`` tokens once prefilled, ``age`` outputs generated,
        if the margin holds at every grid step (``ell``: z² of this test, default the
        forecast's own); on success it joins the projection."""
        q = self._q(np.array([age], dtype=np.int64))[0]
        xs = tokens + self.s
        mean = self.mean + (xs + self.half_block) * q
        var = self.var + xs * xs * q * (1.0 - q)
        if np.any(mean + np.sqrt(var * (self.ell if ell is None else ell)) > self.capacity):
            return False
        self.mean, self.var = mean, var
        self.version += 1
        return True

    def room(self, candidates: Iterable[tuple[int, int]]) -> int:
        """How many of ``candidates`` ((tokens, age), in order) :meth:`admit` would accept one
        after another, without committing them. Vectorised over chunks of doubling size, so
        a long queue behind a small room is not materialised."""
        it = iter(candidates)
        mean, var = self.mean, self.var
        total, size = 0, ROOM_CHUNK
        while True:
            pairs = np.array(list(islice(it, size)), dtype=np.int64).reshape(-1, 2)
            if len(pairs) == 0:
                return total
            q = self._q(pairs[:, 1])
            xs = pairs[:, :1].astype(np.float64) + self.s[None, :]
            m = mean + np.cumsum((xs + self.half_block) * q, axis=0)
            v = var + np.cumsum(xs * xs * q * (1.0 - q), axis=0)
            over = (m + np.sqrt(v * self.ell) > self.capacity).any(axis=1)
            if over.any():
                return total + int(np.argmax(over))
            total += len(pairs)
            mean, var = m[-1], v[-1]
            size *= 2
