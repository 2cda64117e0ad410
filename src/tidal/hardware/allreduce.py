"""All-reduce time as NCCL runs it, per message size (the corrected roofline's TP term).

A ring all-reduce of ``bytes`` over ``tp`` GPUs moves R = 2(tp−1)/tp · bytes over each link.
Largest messages: the p-norm of a latency ``a + b·log2(tp)`` and the transfer
``R·bytes/(η·bw)``. Below that, up to three lower regimes — NCCL's low-latency protocol, a
middle one (LL128 or another algorithm) and further ``steps`` of its channel and algorithm
switches — each ``us + R·bytes/(η_regime·bw)`` up to its size, capped by the regimes above so
the time never falls as the message grows. Constants: ``bench/roofline_fit.py`` (per GPU,
link kind and TP, on the profiles' sweeps).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict


class LinkConst(BaseModel):
    model_config = ConfigDict(extra="forbid")

    lat_us: float = 10.0
    lat_log2_us: float = 0.0
    eta: float = 0.7
    p: float = 1.0
    """p-norm of latency and transfer time (1: their sum; large: their max)."""
    ll_bytes: float = 0.0
    """Messages up to this size take ``ll_us`` plus the transfer at ``ll_eta`` of the link
    (0: no transfer term): NCCL's low-latency protocol (``ll_bytes`` 0: no such regime)."""
    ll_us: float = 0.0
    ll_eta: float = 0.0
    mid_bytes: float = 0.0
    """A middle regime (NCCL's LL128 protocol or another algorithm) up to this size, likewise
    ``mid_us`` plus the transfer at ``mid_eta`` (0: none)."""
    mid_us: float = 0.0
    mid_eta: float = 0.0
    steps: list[tuple[float, float, float]] = []
    """Further regimes between the middle one and the p-norm, ascending ``(upto bytes, us,
    eta)`` each: the staircase of NCCL's channel and algorithm switches (A40 TP 8's PCIe ring);
    none by default."""

    def regimes(self) -> list[tuple[float, float, float]]:
        """Every lower regime, from the largest message size down (the order they cap in)."""
        low = [(self.ll_bytes, self.ll_us, self.ll_eta), (self.mid_bytes, self.mid_us,
                                                            self.mid_eta), *self.steps]  # fmt: skip
        return [r for r in reversed(low) if r[0] > 0]

    def scaled(self, f: float) -> LinkConst:
        """Every latency × ``f`` (sizes and efficiencies kept): a node whose links are 1/f as
        fast, if the latency-bound regimes are NCCL's minimum slices crossing each hop."""
        if f == 1.0:
            return self
        return self.model_copy(update={
            "lat_us": self.lat_us * f, "lat_log2_us": self.lat_log2_us * f,
            "ll_us": self.ll_us * f, "mid_us": self.mid_us * f,
            "steps": [(b, us * f, eta) for b, us, eta in self.steps],
        })  # fmt: skip


def allreduce_time(nbytes: Any, tp: int, bw: float, lc: LinkConst) -> Any:
    """Seconds of one ring all-reduce of ``nbytes`` over ``tp`` GPUs on links of ``bw`` bytes/s,
    as NCCL runs it: one protocol (LL, LL128, Simple) per message size, each with its latency
    and bandwidth. Largest messages: the p-norm of the launch and synchronisation latency
    ``a + b·log2(tp)`` and the transfer ``R·bytes/(η·bw)``, R = 2(tp−1)/tp (p = 1: their sum);
    up to each lower regime's size (``steps``, ``mid_bytes``, ``ll_bytes``),
    ``us + R·bytes/(η_regime·bw)``, each capped by the regime above it, so the time never
    falls as the message grows."""
    ring = 2.0 * (tp - 1) / tp
    lat = (lc.lat_us + lc.lat_log2_us * math.log2(tp)) * 1e-6
    t = (lat**lc.p + (ring * nbytes / (lc.eta * bw)) ** lc.p) ** (1.0 / lc.p)
    for upto, us, eta in lc.regimes():
        reg = us * 1e-6 + (ring * nbytes / (eta * bw) if eta > 0 else 0.0)
        if isinstance(nbytes, np.ndarray):
            t = np.where(nbytes <= upto, np.minimum(reg, t), t)
        elif nbytes <= upto:
            t = min(reg, t)
    return t
