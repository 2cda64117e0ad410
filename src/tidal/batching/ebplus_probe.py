"""EB⁺'s measured arbitration: where the crossover cannot tell EB and MB apart, run both.

The steps crossover (:mod:`tidal.batching.eb_cost`) prices each mode's steady-state cycle on the
deployment's step function. On issue 18's grid its error against the realised runs reaches
±5 % of the cost: RTX PRO 6000 / Llama-3.1-70B / arXiv, EB predicted 4 % cheaper, MB realised
1.3 % faster (vLLM's MB holds 38 requests, a count the crossover has no estimate of: it prices
both at EB's N̂* = 31); B200 / Qwen3-8B / PH c = 128, MB predicted 1.8 % cheaper, realised
5.4 %. Where ``|c_MB − c_EB| < probe_band·min(c_MB, c_EB)`` a decision on the prediction is a
coin flip at the guarantee's scale (1 %), so the selector measures instead, where the window
of ``probe_window`` completions holds ``probe_generations`` generations of the N running
requests (a shorter one samples part of EB's cycle):

1. the current mode A's token rate ``R_A = Σ tokens computed / Σ step time`` over
   ``probe_window`` completions (A is in steady state: a probe starts only past the cooldown);
2. a switch to the other mode B, ``probe_settle`` completions to pass its transient (EB's
   first fill, MB's admissions into the freed cache), then ``R_B`` over ``probe_window``;
3. the verdict: B where ``R_B > (1 + probe_margin)·R_A``, else back to A.

Tokens lost to a preemption come off the mode's count (a recompute is not throughput). The
verdict holds for the level it was measured at: while N = min(N_obs, N̂*), μ̂_L and μ̂_O stay
within ``probe_relevel`` of their values at the probe's start; a prediction past the band
decides as before. A surge, or a demand below N (the closing drain), abandons a probe
without a verdict; one level is probed once.

Exactness: the counts are sums over steps (a fast-forwarded run of m identical steps adds m
steps' tokens and its whole span), and the probe acts only at completions, which end a run.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tidal.batching.eb_options import ProbeOptions

Level = tuple[float, float, float]
"""(N, μ̂_L, μ̂_O): the operating point a verdict was measured at."""


@dataclass(slots=True)
class _Window:
    mode: str
    settle_left: int
    left: int
    tokens: int = 0
    ns: int = 0


@dataclass
class ModeProbe:
    """The arbitration's state: idle, measuring the first mode, or measuring the second."""

    opts: ProbeOptions
    win: _Window | None = None
    rates: dict[str, float] = field(default_factory=dict)
    """Measured token rates (tokens/s) of the current or last probe, by mode."""
    first: str = ""
    verdict: str | None = None
    level: Level | None = None
    """The level of the last probe started (its verdict's, when it has one)."""
    num_probes: int = 0

    @property
    def active(self) -> bool:
        return self.win is not None

    def within(self, signal: float, cost: float, n: float) -> bool:
        """The prediction ``signal = c_MB − c_EB`` is within the band of the cost (with
        ``probe_side: eb``, on EB's side: 0 < signal), and the window holds
        ``probe_generations`` generations of the N running requests."""
        o = self.opts
        low = 0.0 if o.probe_side == "eb" else -o.probe_band * cost
        return (
            o.measure
            and low < signal < o.probe_band * cost
            and o.probe_window >= o.probe_generations * n
        )

    def same_level(self, level: Level) -> bool:
        ref, tol = self.level, self.opts.probe_relevel
        if ref is None:
            return False
        return all(abs(a - b) <= tol * abs(b) for a, b in zip(level, ref, strict=True))

    def start(self, mode: str, level: Level) -> None:
        self.win = _Window(mode, self.opts.probe_settle, self.opts.probe_window)
        self.rates, self.first, self.verdict, self.level = {}, mode, None, level
        self.num_probes += 1

    def abandon(self) -> None:
        self.win = None

    def on_step(self, tokens: int, span_ns: int) -> None:
        w = self.win
        if w is not None and w.settle_left == 0:
            w.tokens += tokens
            w.ns += span_ns

    def on_lost(self, tokens: int) -> None:
        w = self.win
        if w is not None and w.settle_left == 0:
            w.tokens -= tokens

    def on_finished(self) -> str | None:
        """Advance by one completion; the mode to switch to now, if any."""
        w = self.win
        if w is None:
            return None
        if w.settle_left > 0:
            w.settle_left -= 1
            return None
        w.left -= 1
        if w.left > 0:
            return None
        self.rates[w.mode] = w.tokens * 1e9 / w.ns if w.ns > 0 else 0.0
        if len(self.rates) == 1:
            other = "eb" if w.mode == "mb" else "mb"
            self.win = _Window(other, self.opts.probe_settle, self.opts.probe_window)
            return other
        self.win = None
        second = w.mode
        won = self.rates[second] > (1.0 + self.opts.probe_margin) * self.rates[self.first]
        self.verdict = second if won else self.first
        return None if won else self.first
