"""Paged KV-cache block accounting (vLLM's block manager, without tensors).

Invariant: ``num_free_blocks + Σ request.num_blocks (GPU-resident) == num_blocks``, and likewise
for the host swap space. A request holding ``t`` computed tokens holds ``ceil(t / block_size)``
blocks. Block ids are optional: the simulator only counts; the real engine asks for a request's
block table, which is materialised lazily from a free-id list so that bulk accounting (the decode
pool charges many requests one block each in O(1)) and id tables never disagree.
"""

from __future__ import annotations

from tidal.core.request import Request


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


class KVBlockManager:
    prefix_caching = False
    """True for :class:`tidal.core.prefix_cache.PrefixCachingKVManager`."""

    def __init__(
        self,
        num_blocks: int,
        block_size: int = 16,
        watermark: float = 0.01,
        num_host_blocks: int = 0,
        track_ids: bool = False,
    ) -> None:
        if num_blocks <= 0:
            raise ValueError("num_blocks must be positive")
        if block_size <= 0:
            raise ValueError("block_size must be positive")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.watermark_blocks = int(watermark * num_blocks)
        self.num_free_blocks = num_blocks
        self.num_host_blocks = num_host_blocks
        self.num_free_host_blocks = num_host_blocks
        self.track_ids = track_ids
        self._free_ids: list[int] = list(range(num_blocks - 1, -1, -1)) if track_ids else []
        self._tables: dict[int, list[int]] = {}
        self._host: dict[int, int] = {}
        """Blocks each swapped-out request holds in host memory."""
        self.cache_queries = 0
        """Prefix cache: tokens of the admitted requests (vLLM's ``prefix_cache_queries``)."""
        self.cache_hits = 0
        """Prefix cache: of those, tokens found cached (vLLM's ``prefix_cache_hits``)."""
        self.pending_load_ns = 0
        """Host-tier prefix hits admitted but not yet charged to a step (the engine adds it
        to the admitting step's ``stall_ns`` and clears it)."""

    # ------------------------------------------------------------------ queries
    def blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def num_used_blocks(self) -> int:
        return self.num_blocks - self.num_free_blocks

    def usage(self) -> float:
        return (self.num_blocks - self.num_free_blocks) / self.num_blocks

    def num_cached_free_blocks(self) -> int:
        """Free blocks still holding reusable prefix content (none without prefix caching)."""
        return 0

    def can_admit(self, num_new_blocks: int) -> bool:
        """Whether a *new* request may take ``num_new_blocks``, keeping the watermark free."""
        return self.num_free_blocks - num_new_blocks >= self.watermark_blocks

    def match_prefix(self, req: Request) -> tuple[int, int]:
        """(cached prefix tokens, of its blocks those referenced by others) that admitting
        ``req`` would reuse. Without prefix caching: nothing."""
        return 0, 0

    def commit_prefix(self, req: Request, hit_tokens: int) -> None:
        """Admit ``req`` with the prefix :meth:`match_prefix` found (counts the query)."""
        self.cache_queries += req.num_tokens
        if req.num_cached_tokens < 0:
            req.num_cached_tokens = 0

    # ------------------------------------------------------------------ mutation
    def allocate(self, req: Request, num_tokens: int) -> None:
        """Grow ``req`` to hold ``num_tokens`` tokens. Raises if the blocks are not free."""
        need = -(-num_tokens // self.block_size) - req.num_blocks
        if need > 0:
            if need > self.num_free_blocks:
                raise RuntimeError(f"KV overcommit: need {need}, free {self.num_free_blocks}")
            self.num_free_blocks -= need
            req.num_blocks += need

    def take(self, num_blocks: int) -> None:
        """Charge ``num_blocks`` in bulk (the decode pool's aggregate growth)."""
        if num_blocks > self.num_free_blocks:
            raise RuntimeError(f"KV overcommit: need {num_blocks}, free {self.num_free_blocks}")
        self.num_free_blocks -= num_blocks

    def free(self, req: Request) -> None:
        self.num_free_blocks += req.num_blocks
        req.num_blocks = 0
        if self.track_ids:
            table = self._tables.pop(req.request_id, None)
            if table:
                self._free_ids.extend(table)
        assert self.num_free_blocks <= self.num_blocks

    def swap_out(self, req: Request) -> bool:
        """Move ``req``'s blocks to host memory; False (nothing moved) if the host is full."""
        n = req.num_blocks
        if n > self.num_free_host_blocks:
            return False
        self.num_free_host_blocks -= n
        self.free(req)
        self._host[req.request_id] = n
        return True

    def swap_in(self, req: Request) -> bool:
        """Bring ``req``'s swapped blocks back; False if the GPU lacks the room."""
        n = self._host.get(req.request_id, 0)
        if n > self.num_free_blocks:
            return False
        del self._host[req.request_id]
        self.num_free_host_blocks += n
        self.num_free_blocks -= n
        req.num_blocks = n
        return True

    def swap_out_blocks(self, req: Request, n: int) -> int:
        """Chunked swap-out: move up to ``n`` of ``req``'s GPU blocks to host memory (bounded by its
        GPU blocks and the free host blocks). Returns the number moved. Counting only (no block
        ids): the simulator's budgeted, pipelined swapping (docs/research/augserve.md §2.2)."""
        if self.track_ids:
            raise RuntimeError("partial swaps are not supported with block ids")
        m = max(0, min(n, req.num_blocks, self.num_free_host_blocks))
        if m:
            req.num_blocks -= m
            self.num_free_blocks += m
            self.num_free_host_blocks -= m
            self._host[req.request_id] = self._host.get(req.request_id, 0) + m
        return m

    def swap_in_blocks(self, req: Request, n: int, keep_free: int = 0) -> int:
        """Chunked swap-in: move up to ``n`` of ``req``'s host blocks back to the GPU, leaving
        at least ``keep_free`` GPU blocks free. Returns the number moved."""
        if self.track_ids:
            raise RuntimeError("partial swaps are not supported with block ids")
        have = self._host.get(req.request_id, 0)
        m = max(0, min(n, have, self.num_free_blocks - keep_free))
        if m:
            req.num_blocks += m
            self.num_free_blocks -= m
            self.num_free_host_blocks += m
            if m == have:
                del self._host[req.request_id]
            else:
                self._host[req.request_id] = have - m
        return m

    def add_host_space(self, num_blocks: int) -> None:
        """Give the cache ``num_blocks`` more host (swap) blocks (a cluster engine that serves
        augmented requests gets its swap space when it starts)."""
        self.num_host_blocks += num_blocks
        self.num_free_host_blocks += num_blocks

    def host_blocks_of(self, req: Request) -> int:
        return self._host.get(req.request_id, 0)

    def drop_swapped(self, req: Request) -> None:
        """Forget ``req``'s host copy (it finished or was discarded while swapped)."""
        n = self._host.pop(req.request_id, 0)
        self.num_free_host_blocks += n

    # ------------------------------------------------------------------ ids
    def block_table(self, req: Request, num_blocks: int | None = None) -> list[int]:
        """Physical block ids of ``req`` (id tracking only), grown to ``req.num_blocks``.

        ``num_blocks`` grows the table further, to blocks already charged in bulk by
        :meth:`take`: a decode-pool member's ``num_blocks`` is written back lazily, so during a
        step it may lag by the block the step's new token needs. The caller must not ask for
        more blocks than the request holds after the step (the ids must stay charged).
        """
        if not self.track_ids:
            raise RuntimeError("block ids are not tracked by this manager")
        table = self._tables.setdefault(req.request_id, [])
        want = req.num_blocks if num_blocks is None else max(num_blocks, req.num_blocks)
        short = want - len(table)
        if short > 0:
            table.extend(self._free_ids[-short:][::-1])
            del self._free_ids[-short:]
        return table

    def trim(self, req: Request, num_blocks: int) -> None:
        """Return the ids of ``req``'s table beyond its first ``num_blocks`` to the free list
        (blocks charged in bulk for one step — speculative decoding's lookahead — whose charge
        the caller has given back); the request's block count is not changed."""
        table = self._tables.get(req.request_id)
        if table is not None and len(table) > num_blocks:
            self._free_ids.extend(reversed(table[num_blocks:]))
            del table[num_blocks:]

    def check(self, resident: list[Request]) -> None:
        """Assert the accounting invariant over the GPU-resident requests (tests, debug)."""
        held = sum(r.num_blocks for r in resident)
        assert held + self.num_free_blocks == self.num_blocks, (held, self.num_free_blocks)
        assert self.num_free_host_blocks + sum(self._host.values()) == self.num_host_blocks
        if self.track_ids:
            # Ids partition the blocks: tables of resident requests, plus the free list, which
            # still holds the ids of blocks charged but not yet handed to a (lazy) table.
            tabled = [b for r in resident for b in self._tables.get(r.request_id, [])]
            assert len(set(tabled)) == len(tabled), "a block id is in two tables"
            assert not set(tabled) & set(self._free_ids), "a tabled block id is also free"
            assert len(tabled) + len(self._free_ids) == self.num_blocks
            for r in resident:
                assert len(self._tables.get(r.request_id, [])) <= r.num_blocks
            assert set(self._tables) <= {r.request_id for r in resident}, "a freed table leaked"
