"""What the augmented-request component knows of the hardware (cost estimates, never the
clock)."""

from __future__ import annotations

from dataclasses import dataclass

from tidal.augment.waste import IterationProfile
from tidal.hardware.perf import PerfModel


@dataclass(frozen=True)
class AugmentEnv:
    """Step-time model, iteration profile and host-link speed of the deployment."""

    perf: PerfModel
    profile: IterationProfile
    swap_ns_per_token: float
    """KV transfer time per token over the host link (one direction)."""
    kv_bytes_per_token: int
    """Per GPU; converts block·ns of waste to GB·s."""

    @classmethod
    def build(
        cls,
        perf: PerfModel,
        kv_bytes_per_token: int,
        host_link_bytes_per_s: float,
        saturation_tokens: int = 384,
        profile: IterationProfile | None = None,
    ) -> AugmentEnv:
        """``profile``: a measured iteration profile (INFERCEPT's own constants); default: one
        fitted to ``perf`` (:meth:`IterationProfile.from_perf`)."""
        return cls(
            perf,
            profile or IterationProfile.from_perf(perf, saturation_tokens),
            kv_bytes_per_token / host_link_bytes_per_s * 1e9,
            kv_bytes_per_token,
        )
