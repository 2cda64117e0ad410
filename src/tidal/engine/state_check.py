"""The engine state's invariants, asserted over its running set (tests and debugging).

Every running request is in exactly one of the decode pool and the prefills, holds
``blocks_for(num_computed_tokens)`` KV blocks (a pooled one has computed all but its last
token), and at most ``max_num_seqs`` run (``docs/design/engine-state.md``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tidal.engine.state import EngineState


def check_state(state: EngineState) -> None:
    """Assert the invariants of ``state``'s running set (O(running))."""
    state.pool.materialize_all()
    assert len(state.running) <= state.config.max_num_seqs
    assert len(state.pool) + len(state.prefilling) == len(state.running)
    for req in state.running.values():
        assert req.num_blocks == state.kv.blocks_for(req.num_computed_tokens)
        if req.in_pool:
            assert req.num_computed_tokens == req.num_tokens - 1
