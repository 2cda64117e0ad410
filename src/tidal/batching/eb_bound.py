"""What keeps exclusive batching within the KV cache: two admission-bound strategies.

* :class:`CLTBound` (``n_bound: clt``, the paper): N ≤ N̂*, the §2.5 CLT form over the CFR
  cycle occupancy (Proposition 3, :func:`eb_theory.memory_safe_n`); "KV full" is the τ_KV
  heuristic ``free < τ_KV·total``.
* :class:`ForecastBound` (``n_bound: forecast``): N ≤ the steady-state memory-safe N of
  continuous batching (:func:`eb_theory.stationary_safe_n`), and every fill or refill takes only
  the queue-head requests the state-conditioned KV forecast admits (:class:`ForecastGate`);
  "KV full" means fewer free blocks than decoding requests (the forecast reserves the growth).

:class:`ForecastGate` keeps the forecast's projection of the running set and the invariant that
makes it exact under fast-forward: the projection is re-made before the next admission decision
after the running set lost a member (a departure or a preemption: ``stale``), and only then.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from itertools import islice
from typing import TYPE_CHECKING, Any

import numpy as np

from tidal.batching import eb_theory as theory
from tidal.batching.kv_forecast import KVForecast, margin_ell
from tidal.core.request import Request
from tidal.engine.state import AdmissionTest, EngineState

if TYPE_CHECKING:
    from tidal.batching.eb_control import EBController


class ForecastGate:
    """The KV forecast over an engine state: projection, admission tests, refill room."""

    def __init__(self, state: EngineState, eps: float, cold_reserve: float) -> None:
        kv = state.kv
        self.state = state
        self.fc = KVForecast(kv.num_blocks * kv.block_size, kv.block_size, eps)
        self.cold_reserve = cold_reserve
        self.stale = True
        """The projection misses a change of the running set: re-project before the next
        admission decision (set by departures, preemptions and EB⁺'s mode switches)."""
        self._room_cache: tuple[int, list[Any], int, int] | None = None

    @property
    def ready(self) -> bool:
        return self.fc.ready

    def running_state(self) -> tuple[np.ndarray, np.ndarray, int]:
        """Token counts and ages of the running set (decoding, then pending prefills counted
        whole) and the tokens held outside it (a composed component's idle contexts)."""
        st = self.state
        kv = st.kv
        tokens, ages = st.pool.tokens_and_ages()
        held = int(((tokens - 1 + kv.block_size - 1) // kv.block_size).sum())
        pending = st.prefilling
        if pending:
            tokens = np.concatenate([tokens, [r.num_tokens for r in pending]])
            ages = np.concatenate([ages, [r.num_output_tokens for r in pending]])
            held += sum(r.num_blocks for r in pending)
        other = kv.num_blocks - kv.num_free_blocks - held
        return tokens, ages, max(0, other) * kv.block_size

    def current(self) -> KVForecast | None:
        """The forecast with its projection current (None: no estimate yet)."""
        fc = self.fc
        if not fc.ready:
            return None
        if self.stale:
            tokens, ages, reserved = self.running_state()
            fc.project(tokens, ages, reserved_tokens=reserved)
            self.stale = False
        return fc

    def test(self, eps: float | None = None) -> AdmissionTest | None:
        """Admission test that commits accepted requests to the projection (None: no test),
        at overflow probability ``eps`` (default: the forecast's ε).
        Before the first estimate: the ``cold_reserve`` headroom test.

        While the projection is stale a candidate that fits even if every running request and
        it run through the whole horizon — ``Σ(x_i + T + b/2) + z·sqrt(Σ(x_i + T)²/4) ≤ C``
        (q ≤ 1, q(1 − q) ≤ 1/4) — is admitted without projecting: a sufficient condition of
        :meth:`KVForecast.admit`, so the decision is the forecast's; the projection is made
        at the first candidate that needs it (from the same step's state)."""
        fc = self.fc
        if not fc.ready:
            return self._cold_test()
        horizon, hb = float(fc.s[-1]), fc.half_block
        ell = fc.ell if eps is None else margin_ell(eps)
        worst: list[float] = []  # [Σ(x_i + T + b/2) + reserved, Σ(x_i + T)²/4], at first call
        running = self.state.running

        def test(req: Request) -> bool:
            if self.stale:
                if not worst:
                    x, _, reserved = self.running_state()
                    xt = x + horizon
                    xt2 = float((xt * xt).sum())  # not ``xt @ xt``: BLAS order varies by CPU
                    worst.extend((float(xt.sum()) + len(x) * hb + reserved, xt2 / 4.0))
                worst_m, worst_v = worst
                xr = req.num_tokens + horizon
                m, v = worst_m + xr + hb, worst_v + xr * xr / 4.0
                if m + math.sqrt(v * ell) <= fc.capacity:
                    worst[:] = (m, v)
                    return True
                self.current()
            if fc.admit(req.num_tokens, req.num_output_tokens, ell):
                return True
            if not running:  # never refuse an empty instance (liveness)
                self.stale = True
                return True
            return False

        return test

    def _cold_test(self) -> AdmissionTest | None:
        """Before any output length is known, admit while the running set's whole contexts
        and the candidate's fit in ``(1 − cold_reserve)`` of the cache. Contexts only grow
        until a departure, so a refusal holds until one (exact under fast-forward)."""
        reserve = self.cold_reserve
        if reserve <= 0:
            return None
        st = self.state
        kv = st.kv
        limit = (1.0 - reserve) * kv.num_blocks
        committed = kv.num_blocks - kv.num_free_blocks
        committed += sum(kv.blocks_for(r.num_tokens) - r.num_blocks for r in st.prefilling)

        def test(req: Request) -> bool:
            nonlocal committed
            need = kv.blocks_for(req.num_tokens) - req.num_blocks
            if committed + need <= limit or not st.running:
                committed += need
                return True
            return False

        return test

    def room(self, fc: KVForecast, count: int) -> int:
        """:meth:`KVForecast.room` of the first ``count`` queued requests, reusing the last
        answer while the projection and the requests it depended on are unchanged: the answer
        ``r`` depends on the first ``r + 1`` candidates only, or on all ``count`` when all
        fit."""
        waiting = self.state.waiting
        cached = self._room_cache
        if cached is not None and cached[0] == fc.version:
            _, heads, r, asked = cached
            if (r < asked and r < count) or r == asked == count:
                same = len(waiting) >= len(heads) and all(
                    a is b for a, b in zip(heads, islice(iter(waiting), len(heads)), strict=True)
                )
                if same:
                    return r
        heads = list(islice(iter(waiting), count))
        r = fc.room((q.num_tokens, q.num_output_tokens) for q in heads)
        self._room_cache = (fc.version, heads[: r + 1], r, len(heads))
        return r


class CLTBound:
    """The paper's N̂* (§2.5): a static cap; no per-admission test."""

    name = "clt"

    def n_hat(self, ctl: EBController, p0: float, mu_l: float) -> int:
        """N̂* = max N with ``N·D + σ·sqrt(N·ln(1/ε)) ≤ C`` (CFR cycle occupancy D)."""
        return theory.memory_safe_n(
            ctl.capacity_tokens, ctl.theta, p0, mu_l, ctl.opts.bound.eps, ctl.max_seqs
        )

    def kv_full(self, ctl: EBController, num_decoding: int) -> bool:
        return ctl.tau_full()

    def admission_test(self) -> AdmissionTest | None:
        return None

    def limit_refill(self, fillable: int) -> int:
        return fillable


class ForecastBound(CLTBound):
    """Steady-state N cap plus forecast-limited fills and refills."""

    name = "forecast"

    def __init__(self, gate: ForecastGate) -> None:
        self.gate = gate

    def n_hat(self, ctl: EBController, p0: float, mu_l: float) -> int:
        if ctl.n_stat is not None:
            return ctl.n_stat
        return super().n_hat(ctl, p0, mu_l)

    def kv_full(self, ctl: EBController, num_decoding: int) -> bool:
        if self.gate.ready:
            return ctl.state.kv.num_free_blocks < num_decoding
        return ctl.tau_full()

    def admission_test(self) -> AdmissionTest | None:
        return self.gate.test()

    def limit_refill(self, fillable: int) -> int:
        """Pending chunks are running already (in the projection): limit the queue heads to
        those the forecast admits."""
        fc = self.gate.current()
        if fc is None:
            return fillable
        pending = min(len(self.gate.state.prefilling), fillable)
        return pending + self.gate.room(fc, fillable - pending)


Bound = CLTBound
"""The strategy interface (:class:`CLTBound` is the base of every bound)."""

BoundFactory = Callable[[ForecastGate | None], CLTBound]
