"""Prefix caching with physical block ids (the real engine's paged KV tensors), vLLM's APC.

A full block's hash chains its parent's hash and its token ids, ``h_j = hash((h_{j-1},
tokens[j·bs:(j+1)·bs]))``; ``cached`` maps a hash to the block holding it. Blocks are
reference-counted; a block whose count drops to 0 joins the tail of the free queue with its
content kept (a request's table is freed in reverse order, so its last blocks go first); a
block taken from the queue head loses its content (eviction). Invariants (``check``): every
block id is either free (in the queue) or referenced; a referenced block is never in the
queue; ``cached`` and the blocks' hashes agree. The decode pool's bulk :meth:`take` charges
blocks whose ids are handed out lazily by :meth:`block_table` (as in :class:`KVBlockManager`).
"""

from __future__ import annotations

from collections import OrderedDict

from tidal.core.kv import KVBlockManager
from tidal.core.request import Request


class PrefixCachingBlockManager(KVBlockManager):
    prefix_caching = True

    def __init__(self, num_blocks: int, block_size: int = 16, watermark: float = 0.01) -> None:
        super().__init__(num_blocks, block_size, watermark, track_ids=True)
        self._queue: OrderedDict[int, None] = OrderedDict((b, None) for b in range(num_blocks))
        self._ref = [0] * num_blocks
        self._hash_of: dict[int, int] = {}
        self._cached: dict[int, int] = {}
        self._hashes: dict[int, list[int]] = {}
        """Chain hashes of each request's registered full blocks."""
        self._pending: tuple[int, list[int]] | None = None
        self.num_evicted_blocks = 0

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

    def _pop_free(self) -> int:
        b, _ = self._queue.popitem(last=False)
        h = self._hash_of.pop(b, None)
        if h is not None:
            del self._cached[h]
            self.num_evicted_blocks += 1
        return b

    # ------------------------------------------------------------------ matching
    def match_prefix(self, req: Request) -> tuple[int, int]:
        if req.token_ids is None or req.num_blocks or req.num_computed_tokens:
            self._pending = None
            return 0, 0
        hits: list[int] = []
        for h in self._chain(req, (req.num_tokens - 1) // self.block_size):
            b = self._cached.get(h)
            if b is None:
                break
            hits.append(b)
        self._pending = (req.request_id, hits)
        return len(hits) * self.block_size, sum(1 for b in hits if self._ref[b])

    def commit_prefix(self, req: Request, hit_tokens: int) -> None:
        if req.num_cached_tokens < 0:
            req.num_cached_tokens = hit_tokens
        super().commit_prefix(req, hit_tokens)
        self.cache_hits += hit_tokens
        pending, self._pending = self._pending, None
        if not hit_tokens:
            return
        assert pending is not None, "commit_prefix without match_prefix"
        assert pending[0] == req.request_id, "commit_prefix for another request"
        for b in pending[1]:
            if self._ref[b] == 0:
                del self._queue[b]
                self.num_free_blocks -= 1
            self._ref[b] += 1
        self._tables[req.request_id] = list(pending[1])
        req.num_blocks = len(pending[1])
        req.num_computed_tokens = hit_tokens

    def _register(self, req: Request, full: int) -> None:
        """Cache ``req``'s full blocks up to ``full`` (the first holder of a hash keeps it)."""
        table = self._tables.get(req.request_id, [])
        full = min(full, len(table))
        for j, h in enumerate(self._chain(req, full)):
            b = table[j]
            if h not in self._cached and b not in self._hash_of:
                self._cached[h] = b
                self._hash_of[b] = h

    # ------------------------------------------------------------------ mutation
    def allocate(self, req: Request, num_tokens: int) -> None:
        super().allocate(req, num_tokens)
        self.block_table(req)
        self._register(req, num_tokens // self.block_size)

    def block_table(self, req: Request, num_blocks: int | None = None) -> list[int]:
        table = self._tables.setdefault(req.request_id, [])
        want = req.num_blocks if num_blocks is None else max(num_blocks, req.num_blocks)
        while len(table) < want:
            b = self._pop_free()
            self._ref[b] = 1
            table.append(b)
        return table

    def free(self, req: Request) -> None:
        rid = req.request_id
        self._register(req, req.num_computed_tokens // self.block_size)
        table = self._tables.pop(rid, [])
        freed = req.num_blocks - len(table)  # charged in bulk, never handed out
        for b in reversed(table):
            self._ref[b] -= 1
            if self._ref[b] == 0:
                self._queue[b] = None
                freed += 1
        self._hashes.pop(rid, None)
        self.num_free_blocks += freed
        req.num_blocks = 0
        assert self.num_free_blocks <= self.num_blocks

    def trim(self, req: Request, num_blocks: int) -> None:
        """As :meth:`KVBlockManager.trim`; the blocks cut hold no cached content (only full
        blocks of computed tokens are registered) and go to the queue's head, evicted first."""
        table = self._tables.get(req.request_id)
        if table is None or len(table) <= num_blocks:
            return
        for b in table[num_blocks:]:
            self._ref[b] -= 1
            if self._ref[b] == 0:
                self._queue[b] = None
                self._queue.move_to_end(b, last=False)
        del table[num_blocks:]

    def forget_content(self, req: Request) -> None:
        """Uncache ``req``'s blocks: a step that failed may have left them unwritten or half
        written. (``free`` then re-registers only what ``num_computed_tokens`` vouches for,
        which a failed step never advanced.)"""
        for b in self._tables.get(req.request_id, []):
            h = self._hash_of.pop(b, None)
            if h is not None:
                del self._cached[h]

    def swap_out(self, req: Request) -> bool:
        raise RuntimeError("swapping is not supported with prefix caching in the real engine")

    def check(self, resident: list[Request]) -> None:
        lazy = sum(r.num_blocks - len(self._tables.get(r.request_id, [])) for r in resident)
        assert len(self._queue) == self.num_free_blocks + lazy, "free count drifted"
        refs = [0] * self.num_blocks
        for r in resident:
            for b in self._tables.get(r.request_id, []):
                refs[b] += 1
        assert refs == self._ref, "reference counts drifted"
        assert all(self._ref[b] == 0 for b in self._queue), "a referenced block is free"
        assert sum(1 for c in self._ref if c) + len(self._queue) == self.num_blocks, "leak"
        assert all(self._hash_of[b] == h for h, b in self._cached.items())
        assert set(self._tables) <= {r.request_id for r in resident}, "a freed table leaked"
