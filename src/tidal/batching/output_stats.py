"""Online estimates of the output-length distribution (EB paper, Algorithm 1
``alg:adaptive_joint``; ``docs/research/ebplus.md`` §3.1).

Fed one completed request at a time (O(1) on the hot path):

* a sliding window of the last ``window`` (500) output lengths, re-fitted every
  ``update_every`` (100) completions once it holds ``min_samples`` (30): the hazard
  ``h(t) = p0 + η·t`` by weighted least squares (:func:`fit_hazard`);
* ``μ̂_O`` and ``p̂ = 1/mean`` as EMAs (α = 0.2) over batches of ``update_every`` completions, the
  first batch assigned directly (initial μ̂_O = 100, p̂ = 0.01);
* ``μ̂_L`` as an EMA (α = 0.05, initial 512) of prompt lengths, updated per completion, and
  with it an EMA of the squared prompt length (initial 512², so the prompt variance starts at
  0), from which ``Var(L)`` is read (not in Algorithm 1: the stationary MB occupancy of
  :func:`tidal.batching.eb_theory.mb_safe_n` needs it).
"""

from __future__ import annotations

from collections import deque

import numpy as np


def fit_hazard(samples: np.ndarray) -> tuple[float, float] | None:
    """Weighted least squares of the empirical hazard ``ĥ(t) = #{O = t}/#{O ≥ t}`` against
    ``p0 + η·t`` over ``t ∈ [t_5, max(t_95, t_5 + 10)]`` (5th/95th percentile samples,
    ``t ≥ 1``), skipping points with fewer than 5 survivors, weights = survivors. Returns
    ``(p0, η)`` with ``η ≥ 0`` and ``p0 ≥ 1/mean`` (the geometric rate of the same mean), or
    None when the usable weight is below 10. Degenerate normal equations → ``(1/mean, 0)``."""
    n = len(samples)
    if n == 0:
        return None
    s = np.sort(samples.astype(np.int64))
    t_start = max(int(s[int(n * 0.05)]), 1)
    t_95 = max(int(s[int(n * 0.95)]), t_start + 10)
    max_t = int(s[-1])
    counts = np.bincount(s, minlength=max_t + 2)
    survivors = np.cumsum(counts[::-1])[::-1]  # survivors[t] = #{O ≥ t}
    hi = min(t_95, max_t)
    if hi < t_start:
        return None
    t = np.arange(t_start, hi + 1)
    n_t = survivors[t_start : hi + 1]
    keep = n_t >= 5
    t, n_t, d_t = t[keep], n_t[keep], counts[t_start : hi + 1][keep]
    w = n_t.astype(np.float64)
    sum_w = float(w.sum())
    if sum_w < 10:
        return None
    h = d_t / n_t
    tf = t.astype(np.float64)
    sum_wt = float((w * tf).sum())
    sum_wt2 = float((w * tf * tf).sum())
    sum_wh = float((w * h).sum())
    sum_wth = float((w * tf * h).sum())
    mean = float(s.mean())
    floor = 1.0 / mean if mean > 0 else 0.01
    det = sum_w * sum_wt2 - sum_wt * sum_wt
    if abs(det) < 1e-10:
        return floor, 0.0
    p0 = (sum_wt2 * sum_wh - sum_wt * sum_wth) / det
    eta = (sum_w * sum_wth - sum_wt * sum_wh) / det
    return max(p0, floor), max(eta, 0.0)


class OutputStats:
    """The estimator state of Algorithm 1 (see the module docstring for the defaults)."""

    def __init__(
        self,
        window: int = 500,
        update_every: int = 100,
        min_samples: int = 30,
        mu_l0: float = 512.0,
        mu_l_alpha: float = 0.05,
        batch_alpha: float = 0.2,
        mu_o0: float = 100.0,
        p_init: float = 0.01,
    ) -> None:
        self.samples: deque[int] = deque(maxlen=window)
        self.update_every = update_every
        self.min_samples = min_samples
        self.mu_l = mu_l0
        self.mu_l2 = mu_l0 * mu_l0
        """EMA of the squared prompt length (same weight as μ̂_L)."""
        self.mu_l_alpha = mu_l_alpha
        self.batch_alpha = batch_alpha
        self.mu_o = mu_o0
        self.p = p_init
        self.p0 = p_init
        """Hazard intercept p̂0 (per decode step); kept when a fit lacks data."""
        self.eta = 0.0
        """Hazard slope η̂ ≥ 0 (0: constant failure rate, geometric outputs)."""
        self.initialized = False
        """True once the first batch of ``update_every`` completions set μ̂_O and p̂."""
        self.num_completed = 0
        self._since_fit = 0
        self._batch_n = 0
        self._batch_tokens = 0

    def push_output(self, output_len: int) -> bool:
        """Record an output length; True when a hazard re-fit is due now."""
        self.num_completed += 1
        self.samples.append(output_len)
        self._since_fit += 1
        if self._since_fit >= self.update_every and len(self.samples) >= self.min_samples:
            self._since_fit = 0
            return True
        return False

    def refit_hazard(self) -> tuple[float, float]:
        """Re-fit (p̂0, η̂) on the window; keeps the previous values without enough data."""
        fit = fit_hazard(self.window())
        if fit is not None:
            self.p0, self.eta = fit
        return self.p0, self.eta

    def push_batch(self, output_len: int) -> bool:
        """Accumulate for the μ̂_O/p̂ EMAs; True when a batch of ``update_every`` closed now."""
        self._batch_n += 1
        self._batch_tokens += output_len
        if self._batch_n < self.update_every:
            return False
        mean = self._batch_tokens / self._batch_n
        self._batch_n = 0
        self._batch_tokens = 0
        if mean > 0:
            if not self.initialized:
                self.mu_o, self.p = mean, 1.0 / mean
                self.initialized = True
            else:
                a = self.batch_alpha
                self.p = a / mean + (1.0 - a) * self.p
                self.mu_o = a * mean + (1.0 - a) * self.mu_o
        return True

    def push_prompt(self, prompt_len: int) -> None:
        a = self.mu_l_alpha
        self.mu_l = a * prompt_len + (1.0 - a) * self.mu_l
        self.mu_l2 = a * prompt_len * prompt_len + (1.0 - a) * self.mu_l2

    @property
    def var_l(self) -> float:
        """Prompt-length variance from the two EMAs (≥ 0)."""
        return max(0.0, self.mu_l2 - self.mu_l * self.mu_l)

    def window(self) -> np.ndarray:
        """The window's output lengths (oldest first)."""
        return np.fromiter(self.samples, dtype=np.int64, count=len(self.samples))
