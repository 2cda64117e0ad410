"""The ServeGen mix of :func:`tidal.workload.multimodel.servegen_mix`, generated a few windows
at a time: the same requests (times, lengths, models, order, hence ids), in memory that does not
grow with the span.

*Draws.* ``servegen_mix`` draws from one generator, model after model: the model's Poisson
counts (one per 10-minute window), then ``n_i`` uniforms for the arrival offsets, ``n_i`` for
the prompts and ``n_i`` for the outputs (one 64-bit draw per uniform). Numpy's draws are
sequential, so uniforms drawn in pieces equal one big draw from the same state. The first pass
(:class:`MixStream`) draws the counts exactly as ``servegen_mix`` does, records the generator's
state where model i's uniforms begin and skips its ``3·n_i`` draws (generated and discarded in
chunks), so it leaves the generator where ``servegen_mix`` leaves it. Model i then gets three
generators at offsets 0, ``n_i`` and ``2·n_i`` of its uniforms and generates its windows in
order, each value by the same arithmetic as the whole draw.

*Order.* ``servegen_mix`` sorts the model-major concatenation stably by time: the key is
(time, model, index in the model). Window w's arrivals lie in ``[w·W, (w+1)·W]`` ns
(W = 600 s; the upper end only by rounding), so once model i has generated its windows below b,
all its arrivals before ``b·W`` are known: its *horizon*. A release takes from every model its
buffered arrivals before the smallest horizon H and merges them stably by time in model order;
every later arrival of any model is ≥ H, so releases concatenate to exactly the whole order.

*Memory.* A model buffers one fill (about ``rows`` requests, plus one window) beyond what was
released; a release is at most the models' buffers. Neither depends on the span.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from tidal.core.units import INF_NS, NS_PER_S
from tidal.workload.base import RequestSet
from tidal.workload.lengths import quantile_lengths
from tidal.workload.multimodel import (
    QUANTILES_FILE,
    SERVEGEN_WINDOW_S,
    MixConfig,
    _caps,
    power_law_shares,
    read_aggregate_rates,
    servegen_model_rates,
)
from tidal.workload.paths import traces_dir
from tidal.workload.servegen import length_quantiles

WINDOW_NS = round(SERVEGEN_WINDOW_S * NS_PER_S)
_SKIP = 65_536
"""Uniforms generated per discarded piece."""

Release = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]
"""(arrival ns, prompt, output, model, next arrival ns of the same model or INF_NS)."""


def skip_uniforms(rng: np.random.Generator, k: int) -> None:
    """Advance ``rng`` past ``k`` uniforms (``rng.random(k)``), a bounded piece at a time."""
    while k > 0:
        rng.random(min(k, _SKIP))
        k -= _SKIP


def _generator_at(
    rng: np.random.Generator, state: Mapping[str, Any], k: int
) -> np.random.Generator:
    """A new generator in ``state``, ``k`` uniforms on."""
    bits = type(rng.bit_generator)()
    bits.state = state
    g = np.random.Generator(bits)
    skip_uniforms(g, k)
    return g


class _Model:
    """One model's windows, generated in order into a buffer sorted by (time, index)."""

    def __init__(
        self,
        counts: np.ndarray,
        rng: np.random.Generator,
        state: Mapping[str, Any],
        table: dict[str, tuple[np.ndarray, np.ndarray]],
        cfg: MixConfig,
    ) -> None:
        self.counts = counts.astype(np.int64)
        self.cum = np.concatenate([[0], np.cumsum(self.counts)])
        self.n = int(self.cum[-1])
        self.arr = _generator_at(rng, state, 0)
        self.pro = _generator_at(rng, state, self.n)
        self.out = _generator_at(rng, state, 2 * self.n)
        self.table = table
        self.cfg = cfg
        self.cursor = 0
        """First window not generated."""
        self.horizon = 0
        """Every arrival before it is generated (INF_NS once all are)."""
        self.t = self.p = self.o = np.zeros(0, np.int64)

    @property
    def done(self) -> bool:
        return self.horizon >= INF_NS

    def fill(self, rows: int) -> None:
        """Generate the next windows: at least ``rows`` requests or up to the last window."""
        a, last = self.cursor, len(self.counts)
        b = min(max(int(np.searchsorted(self.cum, self.cum[a] + rows)), a + 1), last)
        n = int(self.cum[b] - self.cum[a])
        win = SERVEGEN_WINDOW_S
        start = np.repeat(np.arange(a, b) * win, self.counts[a:b])
        t = start + self.arr.random(n) * win
        t_ns = np.rint(t * NS_PER_S).astype(np.int64)
        prompt = quantile_lengths(*self.table["input_tokens"], n, self.pro)
        output = quantile_lengths(*self.table["output_tokens"], n, self.out)
        prompt, output = _caps(prompt, output, self.cfg)
        order = np.argsort(t_ns, kind="stable")
        self.t = np.concatenate([self.t, t_ns[order]])
        self.p = np.concatenate([self.p, prompt[order]])
        self.o = np.concatenate([self.o, output[order]])
        self.cursor = b
        self.horizon = b * WINDOW_NS if b < last else INF_NS

    def take_before(self, h: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        k = int(np.searchsorted(self.t, h, side="left"))
        out = self.t[:k], self.p[:k], self.o[:k]
        self.t, self.p, self.o = self.t[k:], self.p[k:], self.o[k:]
        return out


class MixStream:
    """The requests of ``servegen_mix(cfg, num_models, rng, pool_rates, quantiles)``, times
    shifted by ``shift_ns``, as a sequence of releases (:meth:`releases`)."""

    def __init__(
        self,
        cfg: MixConfig,
        num_models: int,
        rng: np.random.Generator,
        pool_rates: dict[str, np.ndarray] | None = None,
        quantiles: Path | None = None,
        *,
        shift_ns: int = 0,
        rows: int = 8192,
    ) -> None:
        rates = pool_rates if pool_rates is not None else read_aggregate_rates()
        qfile = quantiles or traces_dir() / QUANTILES_FILE
        self.shares = power_law_shares(num_models, cfg.alpha)
        self.shift_ns = int(shift_ns)
        self.rows = max(int(rows), 1)
        self.models: list[_Model] = []
        for pool, lam in servegen_model_rates(cfg, num_models, rates):
            counts = rng.poisson(lam * SERVEGEN_WINDOW_S)
            table = length_quantiles(pool, qfile)
            state = rng.bit_generator.state
            self.models.append(_Model(counts, rng, state, table, cfg))
            skip_uniforms(rng, 3 * self.models[-1].n)
        self.n = sum(m.n for m in self.models)
        self.source = f"ServeGen mix ({', '.join(cfg.pools)}), {cfg.days:g} days, rate {cfg.rate:g}"
        self.description = (
            f"ServeGen mix of {num_models} models, {self.n} requests over {cfg.days:g} days"
        )
        for m in self.models:
            self._refill(m, -1)

    def __len__(self) -> int:
        return self.n

    def _refill(self, m: _Model, h: int) -> None:
        """Fill until the model's horizon passes ``h`` and it has a next arrival (if any)."""
        while not m.done and (m.horizon <= h or len(m.t) == 0):
            m.fill(self.rows)

    def next_arrivals(self) -> list[int]:
        """Per model, its next arrival not yet released (shifted ns; INF_NS: none)."""
        return [int(m.t[0]) + self.shift_ns if len(m.t) else INF_NS for m in self.models]

    def releases(self) -> Iterator[Release]:
        """The requests in order, in pieces (module docstring); each piece's ``next`` column
        is the same model's following arrival, which may lie in a later piece."""
        while True:
            h = min(m.horizon for m in self.models) if self.models else INF_NS
            parts = [m.take_before(h) for m in self.models]
            for m in self.models:
                self._refill(m, h)
            heads = self.next_arrivals()
            size = sum(len(p[0]) for p in parts)
            if size:
                yield self._merge(parts, heads)
            elif h >= INF_NS:
                return

    def _merge(
        self, parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]], heads: list[int]
    ) -> Release:
        t = np.concatenate([p[0] for p in parts]) + self.shift_ns
        nxt = np.concatenate(
            [
                np.append(p[0][1:] + self.shift_ns, h) if len(p[0]) else p[0]
                for p, h in zip(parts, heads, strict=True)
            ]
        )
        model = np.concatenate([np.full(len(p[0]), i, np.int64) for i, p in enumerate(parts)])
        order = np.argsort(t, kind="stable")
        prompt = np.concatenate([p[1] for p in parts])
        output = np.concatenate([p[2] for p in parts])
        return t[order], prompt[order], output[order], model[order], nxt[order]

    def request_set(self) -> RequestSet:
        """All requests at once (what ``servegen_mix`` returns, shifted)."""
        cols = [np.concatenate(c) for c in zip(*self.releases(), strict=True)] if self.n else []
        if not cols:
            cols = [np.zeros(0, np.int64)] * 5
        return RequestSet(cols[0], cols[1], cols[2], self.source, {"model": cols[3]})
