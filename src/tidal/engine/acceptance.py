"""Accepted lengths of speculative decoding: one seeded draw per (request, verification step).

A verification step of request ``rid`` keeps ``a`` tokens: the accepted prefix of its k drafts
plus the target's own token. With per-position conditional rates α_i and
``A_i = Π_{m≤i} α_m`` (P(drafts 1…i all accepted)), ``a = 1 + #{i ≤ k : U < A_i}`` for one
uniform U — the accepted length is one categorical variable, so one uniform per step suffices
(``P(a ≥ i + 1) = A_i``, hence ``E[a] = 1 + Σ A_i``:
:func:`~tidal.engine.spec_config.expected_tokens`).

The uniform of the j-th verification step of ``rid`` is counter-based (docs/DESIGN.md §3: no
shared generator whose consumption order could depend on batching):
``U = splitmix64(s_rid + (j + 1)·φ) / 2⁶⁴`` (the top 53 bits) with the request's stream state
``s_rid = splitmix64(key ⊕ splitmix64(rid))`` — splitmix64's own sequence, started per request.
``j`` is the request's own step counter (it survives preemption), so a request's accepted
lengths are a function of (seed, rid) alone: never of batch composition, stepping or
fast-forward. The last step of a request is clipped to the tokens it has left (vLLM discards
accepted tokens past ``max_tokens``); counters count the clipped value.
"""

from __future__ import annotations

import numpy as np

_PHI = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31, _S11 = np.uint64(30), np.uint64(27), np.uint64(31), np.uint64(11)
_INV53 = 2.0**-53


def splitmix64(x: np.ndarray) -> np.ndarray:
    """The splitmix64 finaliser on a uint64 array (wrapping arithmetic)."""
    z = x.astype(np.uint64, copy=True)
    with np.errstate(over="ignore"):
        z = (z ^ (z >> _S30)) * _M1
        z = (z ^ (z >> _S27)) * _M2
    return z ^ (z >> _S31)


def uniforms(key: int, rid: int, j0: int, count: int) -> np.ndarray:
    """U of steps ``j0 … j0 + count − 1`` of request ``rid`` under ``key`` (floats in [0, 1))."""
    k = np.array([key & 0xFFFFFFFFFFFFFFFF], dtype=np.uint64)
    r = np.array([rid & 0xFFFFFFFFFFFFFFFF], dtype=np.uint64)
    state = splitmix64(k ^ splitmix64(r))
    j = np.arange(j0 + 1, j0 + count + 1, dtype=np.uint64)
    with np.errstate(over="ignore"):
        x = state + j * _PHI
    return (splitmix64(x) >> _S11).astype(np.float64) * _INV53


class AcceptanceModel:
    """Seeded accepted lengths for k drafts with per-position conditional rates ``alphas``."""

    def __init__(self, alphas: tuple[float, ...] | list[float], key: int) -> None:
        if not alphas:
            raise ValueError("speculation needs at least one draft position")
        self.k = len(alphas)
        self.key = int(key)
        self.survive = np.cumprod(np.asarray(alphas, dtype=np.float64))
        """A_i = Π_{m≤i} α_m, non-increasing in i."""
        self.mean = 1.0 + float(self.survive.sum())

    def lengths(self, rid: int, j0: int, count: int) -> np.ndarray:
        """Unclipped accepted lengths (1 … k + 1) of steps ``j0 … j0 + count − 1``."""
        u = uniforms(self.key, rid, j0, count)
        return 1 + (u[:, None] < self.survive[None, :]).sum(axis=1, dtype=np.int64)

    def lengths_until(self, rid: int, j0: int, tokens_left: int) -> np.ndarray:
        """Accepted lengths from step ``j0`` until ``tokens_left`` tokens are reached, the last
        one clipped so that they sum to exactly ``tokens_left`` (≥ 1)."""
        if tokens_left < 1:
            raise ValueError(f"tokens_left must be >= 1, got {tokens_left}")
        parts: list[np.ndarray] = []
        got = 0
        j = j0
        while got < tokens_left:
            count = int((tokens_left - got) / self.mean * 1.1) + 8
            a = self.lengths(rid, j, count)
            parts.append(a)
            got += int(a.sum())
            j += count
        a = np.concatenate(parts) if len(parts) > 1 else parts[0]
        cum = np.cumsum(a)
        last = int(np.searchsorted(cum, tokens_left, side="left"))
        a = a[: last + 1].copy()
        a[last] -= int(cum[last]) - tokens_left
        return a


def accepted_per_position(lengths: np.ndarray, k: int) -> np.ndarray:
    """How many of the steps accepted draft i (i = 1 … k): #{steps with a ≥ i + 1}."""
    counts = np.bincount(np.asarray(lengths, dtype=np.int64) - 1, minlength=k + 1)
    return counts[::-1].cumsum()[::-1][1 : k + 1]
