"""What a request's tokens are, for prefix matching: segment chain hashes and ends
(:mod:`tidal.core.prefix_cache` explains the content model), and the 63-bit mixing hash."""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass

MASK63 = (1 << 63) - 1
_OPEN = 1 << 62
_M64 = (1 << 64) - 1


def mix(a: int, b: int) -> int:
    """A 63-bit hash of the pair (a, b) (splitmix64 finaliser of ``a·φ ⊕ b``)."""
    x = ((a * 0x9E3779B97F4A7C15) ^ b) & _M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M64
    return (x ^ (x >> 31)) & MASK63


@dataclass(slots=True)
class BlockContent:
    """What a request's tokens are, for prefix matching (:mod:`tidal.core.prefix_cache`)."""

    hashes: list[int]
    """Chain hash of each segment (63-bit, non-negative)."""
    ends: list[int]
    """Exclusive end token of each segment, increasing."""
    tail: int
    """Hash of the request's own tokens past the last segment (its output)."""
    shared: int = -1
    """Leading segments that another request's content may contain (-1: unknown, all of
    them). The later segments and the tail are this request's own: no other request can
    ever match their blocks."""
    _bs: int = 0
    _bounds: list[int] | None = None
    private: int = _OPEN
    """First KV block of the request's own suffix (valid once :meth:`bounds` ran for the
    block size; ``_OPEN``: none known)."""

    def bounds(self, bs: int) -> list[int]:
        """End block of each segment's node (``ends[s] // bs``), then an open-ended tail."""
        if self._bounds is None or self._bs != bs:
            self._bs = bs
            self._bounds = [e // bs for e in self.ends]
            self._bounds.append(_OPEN)
            s = self.shared
            self.private = _OPEN if s < 0 else self._bounds[s - 1] if s else 0
        return self._bounds

    def private_block(self, bs: int) -> int:
        """First KV block no other request can share (``_OPEN`` when not known)."""
        if self.shared == 0:
            return 0
        self.bounds(bs)
        return self.private

    def key(self, s: int) -> int:
        return self.hashes[s] if s < len(self.hashes) else self.tail

    def nodes(self, bs: int, lo: int, hi: int) -> list[tuple[int, int, int]]:
        """(node key, first block, end block) of the nodes that own blocks in ``[lo, hi)``."""
        bounds = self.bounds(bs)
        s = bisect_right(bounds, lo)
        start = bounds[s - 1] if s else 0
        out: list[tuple[int, int, int]] = []
        while start < hi:
            end = bounds[s]
            if end > start:
                out.append((self.key(s), start, end))
            start, s = end, s + 1
        return out
