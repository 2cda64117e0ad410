"""Per-request runtime state of an augmented request inside the scheduler."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum

from tidal.augment.predictor import Prediction
from tidal.core.augmented import AugmentedSpec


class KVMode(IntEnum):
    """Where a request's computed context is while it is not running."""

    GPU = 0
    """All on the GPU (running, Preserve-paused, or queued after a return)."""
    DISCARDED = 1
    """Freed; recomputed on return (``num_computed_tokens`` reset to 0)."""
    SWAPPING_OUT = 2
    """Paused, moving to host memory chunk by chunk (some blocks on each side)."""
    SWAPPED = 3
    """Paused, all on the host."""
    SWAPPING_IN = 4
    """Returned, moving back to the GPU; runnable once all blocks are back."""


@dataclass(slots=True, eq=False)
class AugRun:
    spec: AugmentedSpec | None
    points: list[int]
    """Output counts at which the request pauses (``AugmentedSpec.call_points``)."""
    pred: Prediction
    k: int = 0
    """Index of the next call (calls done so far)."""
    mode: KVMode = KVMode.GPU
    pause_ns: int = -1
    recompute_left: int = 0
    """Already-computed tokens still to be recomputed (after a discard or a preemption)."""
    value: float = 0.0
    """AugServe's scheduling value (lower goes first)."""
    ready_ns: int = 0
    """When the request last entered the ready queue (anti-starvation clock)."""
    swapped_this_call: bool = False
    discarded_this_call: bool = False
    counts: list[int] = field(default_factory=lambda: [0, 0, 0])
    """Calls resolved by Preserve, Discard, Swap (how the context spent each call)."""

    def next_target(self, max_output: int) -> int:
        return self.points[self.k] if self.k < len(self.points) else max_output

    def at_call_point(self, num_output: int) -> bool:
        return self.k < len(self.points) and num_output >= self.points[self.k]
