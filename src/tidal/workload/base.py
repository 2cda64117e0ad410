"""``RequestSet``: a workload as columns (arrival ns, prompt and output lengths), sorted by arrival.

Columns rather than objects keep a million requests in a few tens of MB (docs/DESIGN.md §4); the
simulator creates a ``Request`` object only when a request arrives and drops it when it ends.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tidal.workload.content import PrefixContent


@dataclass(frozen=True)
class RequestSet:
    arrival_ns: np.ndarray
    """int64, non-decreasing."""
    prompt_len: np.ndarray
    """int64, ≥ 1."""
    output_len: np.ndarray
    """int64, ≥ 1."""
    source: str = ""
    """Human-readable origin (trace path or generator description)."""
    extra: dict[str, np.ndarray] = field(default_factory=dict)
    """Optional per-request columns (e.g. ``model`` index, ``client``), same length."""
    payloads: tuple[object, ...] | None = None
    """Optional per-request objects handed to ``Request.payload`` (e.g. the segments of an
    augmented request, :class:`tidal.core.augmented.AugmentedSpec`), same length."""
    content: PrefixContent | None = None
    """Optional prompt content for prefix caching (segment ids per request), same length."""

    def __post_init__(self) -> None:
        n = len(self.arrival_ns)
        if len(self.prompt_len) != n or len(self.output_len) != n:
            raise ValueError("RequestSet columns differ in length")
        for k, v in self.extra.items():
            if len(v) != n:
                raise ValueError(f"RequestSet column {k!r} differs in length")
        if self.payloads is not None and len(self.payloads) != n:
            raise ValueError("RequestSet payloads differ in length")
        if self.content is not None and len(self.content) != n:
            raise ValueError("RequestSet content differs in length")

    def __len__(self) -> int:
        return len(self.arrival_ns)

    def take(self, idx: np.ndarray | slice) -> RequestSet:
        return RequestSet(
            self.arrival_ns[idx],
            self.prompt_len[idx],
            self.output_len[idx],
            self.source,
            {k: v[idx] for k, v in self.extra.items()},
            _take_payloads(self.payloads, idx),
            None if self.content is None else self.content.take(idx),
        )

    @property
    def span_s(self) -> float:
        if len(self) < 2:
            return 0.0
        return float(self.arrival_ns[-1] - self.arrival_ns[0]) / 1e9


def _take_payloads(
    payloads: tuple[object, ...] | None, idx: np.ndarray | slice
) -> tuple[object, ...] | None:
    if payloads is None:
        return None
    if isinstance(idx, slice):
        return payloads[idx]
    arr = np.asarray(idx)
    if arr.dtype == bool:
        arr = np.flatnonzero(arr)
    return tuple(payloads[int(i)] for i in arr)
