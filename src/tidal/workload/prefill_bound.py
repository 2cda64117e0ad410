"""The prefill work no schedule can avoid, given the prompts' content.

A cached prefix is computed once, so a roofline bound (:func:`tidal.hardware.roofline.
roofline_token_throughput`) that charged every prompt token as computed would be no bound: a
shared 8k system prompt runs at 80× it. Here every content segment is a prefix-tree node, named by
its chain hash (:class:`tidal.workload.content.PrefixContent`); a node must be computed at
least once, by prefill or — where some request holds it in its output (a session's answer,
handed on as KV) — by decode, which the bound already counts. So the prefill a schedule
cannot avoid is, per distinct node, the fewest of its tokens any request holds in its prompt,
plus every prompt token no segment covers. Each such token attends at least its own position.
Evictions, block granularity and vLLM's recomputed last token only add work: the bound
stays a bound.

Before a measured phase (warm-up requests, earlier phases) some nodes may already be cached:
``known`` names them, and each is charged nothing (a lower bound on the work: the cache may
have evicted it)."""

from __future__ import annotations

import numpy as np

from tidal.workload.content import PrefixContent


def unavoidable_prefill(
    prompt_len: np.ndarray, content: PrefixContent | None, known: np.ndarray | None = None
) -> tuple[float, float]:
    """(prompt tokens some schedule must compute, Σ of their positions) — without content,
    every prompt token: (ΣL, ΣL²/2); nodes whose hash is in ``known`` are free."""
    L = np.asarray(prompt_len, dtype=np.float64)
    if content is None or len(L) == 0:
        return float(L.sum()), float((L * L / 2.0).sum())
    count = content.count
    flat = np.repeat(content.offset, count) + (
        np.arange(int(count.sum())) - np.repeat(np.cumsum(count) - count, count)
    )
    row = np.repeat(np.arange(len(count)), count)
    ends = content.ends[flat].astype(np.float64)
    starts = ends - content.lens[flat]
    in_prompt = np.clip(np.minimum(ends, L[row]) - starts, 0.0, None)
    hashes = content.hashes[flat]
    # per distinct node: the occurrence with the fewest prompt tokens
    order = np.lexsort((in_prompt, hashes))
    first = np.ones(len(order), dtype=bool)
    first[1:] = hashes[order][1:] != hashes[order][:-1]
    pick = order[first]
    paid, at = in_prompt[pick], starts[pick]
    if known is not None and len(known):
        paid = np.where(np.isin(hashes[pick], known), 0.0, paid)
    covered = np.zeros(len(L))
    np.maximum.at(covered, row, np.minimum(ends, L[row]))
    tail = np.clip(L - covered, 0.0, None)
    tokens = float(paid.sum() + tail.sum())
    positions = float((paid * at + paid * paid / 2.0).sum() + (tail * covered + tail**2 / 2).sum())
    return tokens, positions
