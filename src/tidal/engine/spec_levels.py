"""First-join levels of a whole draw block, for the speculative decode pool.

When the requests are announced (:meth:`~tidal.engine.acceptance.AcceptanceModel.expect`), a
request's first join into :class:`~tidal.engine.spec_pool.SpecDecodePool` usually has the
announced computed count and tokens left, so its packed levels ``P(j)`` (the pool's module
docstring) can be computed for every row of its draw block in one vectorised pass instead
of three array operations and a binary search per join. The expression is the pool's
``_levels`` row by row, on the same integers: the values are identical.
"""

from __future__ import annotations

import numpy as np

from tidal.engine.acceptance import DrawBlock


def first_join_levels(
    block: DrawBlock, c0: np.ndarray, left: np.ndarray, bs: int, max_tokens_blocks: int
) -> tuple[np.ndarray, np.ndarray, list[int], list[int], list[int]]:
    """``(levels, y, c0s, lefts, lasts)`` for the first ``len(left)`` rows of ``block`` with
    announced computed counts ``c0`` and tokens left ``left`` at block size ``bs``: the packed
    levels at every slot (row r's ``P(j)`` at ``levels[starts[r] + j]``, j < lasts[r]), the
    scaled prefix sums ``y = cum·(2³²·bs + 1)`` (kept in ``block.scaled``), the two
    announcements as lists and each row's steps ``last`` to its departure (−1 where the row
    falls short of its tokens left or the pool refuses the request: the join's general path
    handles those)."""
    scale = (bs << 32) + 1
    n = len(left)
    span = np.array(block.widths[:n], dtype=np.int64) + 1
    starts = np.array(block.starts[:n], dtype=np.int64)
    total = int(starts[-1] + span[-1])
    y = block.scaled.get(scale)
    if y is None:
        y = block.scaled[scale] = block.cum * scale
    run = block.running()
    base = run[starts]  # row r: the first slot whose running sum reaches base + left
    lasts = run[:total].searchsorted(base + left) - starts
    bad = np.array(block.totals[:n]) < left  # short rows, and what the join refuses
    bad |= (left < 1) | (left * bs >= max_tokens_blocks)
    lasts[bad] = -1
    b0 = c0 + bs - 1
    k = b0 - (left + b0) // bs * bs - (left << 32) * bs
    k[bad] = 0
    lvl = y[:total] + np.repeat(k, span)
    if bs & (bs - 1) == 0:  # a power of two: a shift (floor division)
        lvl >>= bs.bit_length() - 1
    else:
        lvl //= bs
    return lvl, y, c0.tolist(), left.tolist(), lasts.tolist()
