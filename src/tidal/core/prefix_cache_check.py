"""The counting prefix cache's invariants, asserted over its pool and its request references.

``held <= cached`` and ``held = max(holders)`` for every node, no dead node kept; the free count
``num_free_blocks`` = anonymous free + own runs + Σ (cached − held); every physical block
accounted for once: ``Σ anonymous free runs + Σ own runs + Σ cached + Σ anonymous blocks of
requests == num_blocks``; only resident requests hold references (``docs/design/prefix-cache.md``).
"""

from __future__ import annotations

from tidal.core.prefix_queue import CacheNode, PrefixQueue
from tidal.core.request import Request


def check_index(
    pool: PrefixQueue, refs: dict[int, list[CacheNode]], resident: list[Request]
) -> None:
    """Assert the invariants of :class:`tidal.core.prefix_cache.SegmentIndex` over ``pool``,
    given the nodes each request references (``refs``) and the requests resident on the GPU."""
    anon_free, own = pool.check_queue()
    cached, held = own, 0  # own runs: cached, not held
    if pool.tier is not None:
        pool.tier.check(pool.nodes)
    for node in pool.nodes.values():
        assert node.cached or node.holders or node.host, "a dead node was kept"
        assert 0 <= node.held <= node.cached, "a referenced block was evicted"
        assert node.held == max(node.holders.values(), default=0)
        assert node.entry is None or node.entry[0] is node
        cached += node.cached
        held += node.held
    assert anon_free + cached - held == pool.num_free_blocks, "free count drifted"
    anon_used = 0
    for r in resident:
        reg = sum(n.holders[r.request_id] for n in refs.get(r.request_id, []))
        assert reg <= r.num_blocks
        anon_used += r.num_blocks - reg
    assert anon_free + cached + anon_used == pool.num_blocks, "a block leaked"
    assert set(refs) <= {r.request_id for r in resident}, "a freed request holds refs"
