"""Prompt content for prefix caching, as columns: every request's segments (id, tokens).

A segment is a run of tokens with an id: equal ids at equal positions mean equal tokens (a
Mooncake trace's 512-token ``hash_ids``, a shared system prompt, a previous turn's answer). All
requests' segments live in two flat int64 arrays (``ids``, ``lens``); request ``i`` owns
``[offset[i], offset[i] + count[i])``, so a million requests cost 16 bytes per segment and no
Python object until a request arrives (:meth:`PrefixContent.block_content`). The chain hash
of segment s is ``H_s = mix(mix(H_{s-1}, id_s), len_s)`` (``H_{-1}`` a fixed seed), computed
once for all requests, one vectorised pass per segment position.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tidal.core.prefix_cache import BlockContent, mix

_SEED = 0x5EED_CAC4E
_TAIL = 0x7A11
_K = (0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB)


def mix_array(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """:func:`tidal.core.prefix_cache.mix` elementwise on uint64 arrays (wrapping)."""
    with np.errstate(over="ignore"):
        x = (a * np.uint64(_K[0])) ^ b
        x = (x ^ (x >> np.uint64(30))) * np.uint64(_K[1])
        x = (x ^ (x >> np.uint64(27))) * np.uint64(_K[2])
        x = x ^ (x >> np.uint64(31))
    return x & np.uint64((1 << 63) - 1)


@dataclass(frozen=True, eq=False)
class PrefixContent:
    """Build with :meth:`from_segments`; ``hashes`` and ``ends`` are derived from the flat
    segment arrays, which rows share (``take`` only subsets ``offset`` and ``count``)."""

    ids: np.ndarray
    """int64, flat: segment ids of all requests."""
    lens: np.ndarray
    """int64, flat: tokens of each segment (≥ 1)."""
    ends: np.ndarray
    """int64, flat: exclusive end token of each segment within its request."""
    hashes: np.ndarray
    """uint64, flat: chain hash of each segment."""
    offset: np.ndarray
    """int64, per request: first segment."""
    count: np.ndarray
    """int64, per request: number of segments (0: no content, never shared)."""
    run_hashes: np.ndarray
    """uint64, flat: chain hash of each run (segments the cache treats as one, :func:`runs`)."""
    run_ends: np.ndarray
    """int64, flat: end token of each run within its request."""
    run_offset: np.ndarray
    """int64, per request: first run."""
    run_count: np.ndarray
    """int64, per request: number of runs."""
    run_shared: np.ndarray
    """int64, per request: its leading runs whose chain hash another request also has (the
    rest are its own, :attr:`tidal.core.block_content.BlockContent.shared`)."""

    @classmethod
    def from_segments(cls, ids: np.ndarray, lens: np.ndarray, count: np.ndarray) -> PrefixContent:
        """Requests' segments back to back: request i has the next ``count[i]`` of them."""
        ids = np.asarray(ids, dtype=np.int64)
        lens = np.asarray(lens, dtype=np.int64)
        count = np.asarray(count, dtype=np.int64)
        if len(ids) != len(lens) or int(count.sum()) != len(ids):
            raise ValueError("segment ids, lengths and counts do not agree")
        if len(lens) and int(lens.min()) < 1:
            raise ValueError("a segment has no tokens")
        offset = np.cumsum(count) - count
        pos = np.arange(len(ids), dtype=np.int64) - np.repeat(offset, count)
        csum = np.cumsum(lens)
        # a request without segments may sit at the end (offset == len(ids)): clip its index,
        # its value is repeated zero times
        first = np.minimum(offset, max(len(ids) - 1, 0))
        ends = csum - np.repeat(csum[first] - lens[first], count) if len(ids) else csum
        hashes = np.empty(len(ids), dtype=np.uint64)
        for p in range(int(count.max()) if len(count) and len(ids) else 0):
            at = np.flatnonzero(pos == p)
            prev = hashes[at - 1] if p else np.full(len(at), _SEED, dtype=np.uint64)
            h = mix_array(prev, ids[at].astype(np.uint64))
            hashes[at] = mix_array(h, lens[at].astype(np.uint64))
        keep = runs(hashes, offset, count)
        row = np.repeat(np.arange(len(count)), count)
        run_count = np.bincount(row[keep], minlength=len(count)).astype(np.int64)
        run_offset = np.cumsum(run_count) - run_count
        run_hashes = hashes[keep]
        return cls(
            ids,
            lens,
            ends,
            hashes,
            offset,
            count,
            run_hashes,
            ends[keep],
            run_offset,
            run_count,
            shared_runs(run_hashes, run_offset, run_count),
        )

    def __len__(self) -> int:
        return len(self.offset)

    def take(self, idx: np.ndarray | slice) -> PrefixContent:
        """The rows ``idx`` (flat arrays shared)."""
        return PrefixContent(
            self.ids,
            self.lens,
            self.ends,
            self.hashes,
            self.offset[idx],
            self.count[idx],
            self.run_hashes,
            self.run_ends,
            self.run_offset[idx],
            self.run_count[idx],
            self.run_shared[idx],
        )

    def segments(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(ids, lens, count) of the rows, back to back (gathered)."""
        flat = np.repeat(self.offset, self.count) + (
            np.arange(int(self.count.sum()))
            - np.repeat(np.cumsum(self.count) - self.count, self.count)
        )
        return self.ids[flat], self.lens[flat], self.count

    def truncate(self, max_tokens: np.ndarray) -> PrefixContent:
        """Content clipped to each request's first ``max_tokens`` tokens (a capped prompt)."""
        ids, lens, count = self.segments()
        row = np.repeat(np.arange(len(count)), count)
        ends = np.cumsum(lens)
        ends = (
            ends - np.repeat(ends[np.cumsum(count) - count] - lens[np.cumsum(count) - count], count)
            if len(lens)
            else ends
        )
        starts = ends - lens
        cap = np.asarray(max_tokens, dtype=np.int64)[row]
        keep = starts < cap
        new_lens = np.minimum(lens, cap - starts)[keep]
        new_count = np.bincount(row[keep], minlength=len(count)).astype(np.int64)
        return PrefixContent.from_segments(ids[keep], new_lens, new_count)

    def block_content(self, i: int, salt: int) -> BlockContent | None:
        """Request ``i``'s content (``salt`` makes its tail, the output, unique)."""
        c = int(self.run_count[i])
        if c == 0:
            return None
        o = int(self.run_offset[i])
        hashes = self.run_hashes[o : o + c].tolist()
        ends = self.run_ends[o : o + c].tolist()
        tail = mix(mix(hashes[-1], _TAIL), salt)
        return BlockContent(hashes, ends, tail, int(self.run_shared[i]))


def runs(hashes: np.ndarray, offset: np.ndarray, count: np.ndarray) -> np.ndarray:
    """Which segments end a run: segment s is merged into s + 1 when, in every request, the
    content up to s (chain hash H_s) goes on, always with the same next segment. Then no
    request can share s without s + 1, so the cache's hit, eviction and accounting are those
    of the unmerged segments while it handles one node instead of many (a static radix-tree
    compression: a long prompt's never-shared tail becomes one node)."""
    n = len(hashes)
    keep = np.ones(n, dtype=bool)
    if n == 0:
        return keep
    end = np.uint64(1 << 63)  # chain hashes are < 2^63
    succ = np.full(n, end, dtype=np.uint64)
    last = np.zeros(n, dtype=bool)
    last[(offset + count - 1)[count > 0]] = True
    inner = np.flatnonzero(~last)
    succ[inner] = hashes[inner + 1]
    pairs = np.unique(np.stack([hashes, succ]), axis=1)
    heads, fanout = np.unique(pairs[0], return_counts=True)
    single = heads[fanout == 1]
    keep[np.isin(hashes, single) & (succ != end)] = False
    return keep


def shared_runs(hashes: np.ndarray, offset: np.ndarray, count: np.ndarray) -> np.ndarray:
    """Per request, how many of its leading runs have a chain hash that occurs in another
    request too (equal chain hashes mean equal prefixes, so a request's shared runs are a
    prefix of its runs and the rest can only ever be matched by the request itself)."""
    n = len(count)
    if len(hashes) == 0:
        return np.zeros(n, dtype=np.int64)
    _, inv, occurs = np.unique(hashes, return_inverse=True, return_counts=True)
    own = occurs[inv] == 1
    pos = np.arange(len(hashes), dtype=np.int64) - np.repeat(offset, count)
    first_own = np.where(own, pos, np.iinfo(np.int64).max)
    out = count.astype(np.int64).copy()
    rows = np.flatnonzero(count > 0)
    out[rows] = np.minimum(out[rows], np.minimum.reduceat(first_own, offset[rows]))
    return out


def unique_content(prompt_len: np.ndarray) -> PrefixContent:
    """Every prompt its own content (shared with no other request): the cache then serves
    only a request's own re-admissions (after a preemption or a discarded tool call)."""
    n = len(prompt_len)
    ids = (1 << 43) + np.arange(n, dtype=np.int64)
    return PrefixContent.from_segments(ids, np.asarray(prompt_len), np.ones(n, dtype=np.int64))


def content_token_ids(
    content: PrefixContent | None, prompt_len: np.ndarray, rng: np.random.Generator, vocab: int
) -> list[list[int]]:
    """Token ids for a real engine that realise ``content``: segment ``(id, len)`` is the same
    ``len`` tokens wherever it occurs (drawn from a generator seeded by both), the rest of
    each prompt is drawn from ``rng``; so two prompts share a token prefix exactly where
    their segments do (what the simulator's chain hashes assume). Without content, every
    prompt is drawn from ``rng``."""
    plens = [int(p) for p in prompt_len]
    if content is None:
        return [rng.integers(0, vocab, p).tolist() for p in plens]
    ids, lens, count = content.segments()
    memo: dict[tuple[int, int], list[int]] = {}
    out: list[list[int]] = []
    j = 0
    for i, p in enumerate(plens):
        toks: list[int] = []
        for _ in range(int(count[i])):
            key = (int(ids[j]), int(lens[j]))
            j += 1
            if key not in memo:
                seg = np.random.default_rng([key[0] & ((1 << 63) - 1), key[1], 0x70C5])
                memo[key] = seg.integers(0, vocab, key[1]).tolist()
            toks += memo[key]
        toks = toks[:p]
        out.append(toks + rng.integers(0, vocab, p - len(toks)).tolist())
    return out
