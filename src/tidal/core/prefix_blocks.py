"""Prefix caching with physical block ids (the real engine's paged KV tensors), vLLM's APC:
a :class:`CachingBlockPool` (free queue, reference counts, hash → block) and a
:class:`BlockHashIndex` (each request's table and chain hashes), composed by :func:`block_hash_kv`.

A full block's hash chains its parent's hash and its token ids, ``h_j = hash((h_{j-1},
tokens[j·bs:(j+1)·bs]))``; ``cached`` maps a hash to the block holding it. Blocks are
reference-counted; a block whose count drops to 0 joins the tail of the free queue with its
content kept (a request's table is freed in reverse order, so its last blocks go first); a
block taken from the queue head loses its content (eviction). Invariants (``check``): every
block id is either free (in the queue) or referenced; a referenced block is never in the
queue; ``cached`` and the blocks' hashes agree. The decode pool's bulk ``take`` charges blocks
whose ids are handed out lazily by :meth:`BlockHashIndex.block_table` (as without caching).
"""

from __future__ import annotations

from collections import OrderedDict

from tidal.core.block_pool import BlockPool
from tidal.core.host_cache import HostTier
from tidal.core.kv import KVCacheManager
from tidal.core.request import Request


class CachingBlockPool(BlockPool):
    """Physical blocks, reference-counted; free ones keep their content until taken (vLLM's
    ``BlockPool``: free queue, ``ref_cnt``, ``cached_block_hash_to_block``)."""

    cached_content = True

    def __init__(self, num_blocks: int) -> None:
        super().__init__(num_blocks)
        self.track_ids = True
        self.queue: OrderedDict[int, None] = OrderedDict((b, None) for b in range(num_blocks))
        """Free block ids, the next one to hand out (and evict) first."""
        self.ref = [0] * num_blocks
        self.hash_of: dict[int, int] = {}
        self.cached: dict[int, int] = {}
        """Chain hash → the block holding it."""
        self._evicted = 0

    @property
    def num_evicted_blocks(self) -> int:
        return self._evicted

    def pop_block(self) -> int:
        """Hand out the free queue's head (its count was charged), evicting its content."""
        b, _ = self.queue.popitem(last=False)
        h = self.hash_of.pop(b, None)
        if h is not None:
            del self.cached[h]
            self._evicted += 1
        self.ref[b] = 1
        return b

    def touch(self, b: int) -> None:
        """One more reference to block ``b`` (a prefix hit); a free one leaves the queue."""
        if self.ref[b] == 0:
            del self.queue[b]
            self.num_free_blocks -= 1
        self.ref[b] += 1

    def unref(self, b: int) -> int:
        """One reference less; 1 if ``b`` became free (it joins the queue's tail), else 0."""
        self.ref[b] -= 1
        if self.ref[b] == 0:
            self.queue[b] = None
            return 1
        return 0

    def cache(self, h: int, b: int) -> None:
        """Block ``b`` holds chain hash ``h`` (the first holder of a hash keeps it)."""
        if h not in self.cached and b not in self.hash_of:
            self.cached[h] = b
            self.hash_of[b] = h

    def uncache(self, b: int) -> None:
        h = self.hash_of.pop(b, None)
        if h is not None:
            del self.cached[h]


class BlockHashIndex:
    """Each request's block table and chain hashes over a :class:`CachingBlockPool`."""

    supports_swap = False

    def __init__(self, pool: CachingBlockPool, block_size: int) -> None:
        self.pool = pool
        self.block_size = block_size
        self._tables: dict[int, list[int]] = {}
        self._hashes: dict[int, list[int]] = {}
        """Chain hashes of each request's registered full blocks."""
        self._pending: tuple[int, list[int]] | None = None

    # ------------------------------------------------------------------ hashing
    def _chain(self, req: Request, upto: int) -> list[int]:
        """Hashes of ``req``'s first ``upto`` full blocks (token ids known), memoised."""
        hs = self._hashes.setdefault(req.request_id, [])
        toks, bs = req.token_ids or [], self.block_size
        upto = min(upto, len(toks) // bs)
        while len(hs) < upto:
            j = len(hs)
            hs.append(hash((hs[-1] if hs else 0, tuple(toks[j * bs : (j + 1) * bs]))))
        return hs[:upto]

    # ------------------------------------------------------------------ matching
    def match(self, req: Request) -> tuple[int, int]:
        if req.token_ids is None or req.num_blocks or req.num_computed_tokens:
            self._pending = None
            return 0, 0
        hits: list[int] = []
        cached = self.pool.cached
        for h in self._chain(req, (req.num_tokens - 1) // self.block_size):
            b = cached.get(h)
            if b is None:
                break
            hits.append(b)
        self._pending = (req.request_id, hits)
        ref = self.pool.ref
        return len(hits) * self.block_size, sum(1 for b in hits if ref[b])

    def commit(self, req: Request, hit_tokens: int) -> int:
        pending, self._pending = self._pending, None
        if not hit_tokens:
            return 0
        assert pending is not None, "commit_prefix without match_prefix"
        assert pending[0] == req.request_id, "commit_prefix for another request"
        for b in pending[1]:
            self.pool.touch(b)
        self._tables[req.request_id] = list(pending[1])
        req.num_blocks = len(pending[1])
        req.num_computed_tokens = hit_tokens
        return 0

    def _register(self, req: Request, full: int) -> None:
        """Cache ``req``'s full blocks up to ``full`` (the first holder of a hash keeps it)."""
        table = self._tables.get(req.request_id, [])
        full = min(full, len(table))
        for j, h in enumerate(self._chain(req, full)):
            self.pool.cache(h, table[j])

    # ------------------------------------------------------------------ mutation
    def allocate(self, req: Request, num_tokens: int) -> None:
        need = -(-num_tokens // self.block_size) - req.num_blocks
        if need > 0:
            self.pool.take_now(need)
            req.num_blocks += need
        self.block_table(req, None)
        self._register(req, num_tokens // self.block_size)

    def block_table(self, req: Request, num_blocks: int | None) -> list[int]:
        table = self._tables.setdefault(req.request_id, [])
        want = req.num_blocks if num_blocks is None else max(num_blocks, req.num_blocks)
        while len(table) < want:
            table.append(self.pool.pop_block())
        return table

    def free(self, req: Request) -> None:
        rid = req.request_id
        self._register(req, req.num_computed_tokens // self.block_size)
        table = self._tables.pop(rid, [])
        freed = req.num_blocks - len(table)  # charged in bulk, never handed out
        for b in reversed(table):
            freed += self.pool.unref(b)
        self._hashes.pop(rid, None)
        self.pool.num_free_blocks += freed
        req.num_blocks = 0
        assert self.pool.num_free_blocks <= self.pool.num_blocks

    def release_tail(self, req: Request, count: int) -> None:
        raise RuntimeError("partial swaps are not supported with block ids")

    def add_host_tier(self, tier: HostTier) -> None:
        raise RuntimeError("the real engine's prefix cache has no host tier")

    def trim(self, req: Request, num_blocks: int) -> None:
        """As :meth:`KVCacheManager.trim`; the blocks cut hold no cached content (only full
        blocks of computed tokens are registered) and go to the queue's head, evicted first."""
        table = self._tables.get(req.request_id)
        if table is None or len(table) <= num_blocks:
            return
        ref, queue = self.pool.ref, self.pool.queue
        for b in table[num_blocks:]:
            ref[b] -= 1
            if ref[b] == 0:
                queue[b] = None
                queue.move_to_end(b, last=False)
        del table[num_blocks:]

    def forget_content(self, req: Request) -> None:
        """Uncache ``req``'s blocks: a step that failed may have left them unwritten or half
        written. (``free`` then re-registers only what ``num_computed_tokens`` vouches for,
        which a failed step never advanced.)"""
        for b in self._tables.get(req.request_id, []):
            self.pool.uncache(b)

    def check(self, resident: list[Request]) -> None:
        pool = self.pool
        lazy = sum(r.num_blocks - len(self._tables.get(r.request_id, [])) for r in resident)
        assert len(pool.queue) == pool.num_free_blocks + lazy, "free count drifted"
        refs = [0] * pool.num_blocks
        for r in resident:
            for b in self._tables.get(r.request_id, []):
                refs[b] += 1
        assert refs == pool.ref, "reference counts drifted"
        assert all(pool.ref[b] == 0 for b in pool.queue), "a referenced block is free"
        assert sum(1 for c in pool.ref if c) + len(pool.queue) == pool.num_blocks, "leak"
        assert all(pool.hash_of[b] == h for h, b in pool.cached.items())
        assert set(self._tables) <= {r.request_id for r in resident}, "a freed table leaked"


def block_hash_kv(num_blocks: int, block_size: int = 16, watermark: float = 0.01) -> KVCacheManager:
    """The real engine's KV manager with prefix caching (block ids, hashed token blocks)."""
    pool = CachingBlockPool(num_blocks)
    return KVCacheManager(
        num_blocks, block_size, watermark, pool=pool, index=BlockHashIndex(pool, block_size)
    )


PrefixCachingBlockManager = block_hash_kv
"""The factory's earlier name (it was a subclass; callers construct it the same way)."""
