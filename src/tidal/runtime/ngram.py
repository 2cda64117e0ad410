"""N-gram (prompt lookup) drafting: vLLM's ``ngram`` speculative proposer, and the counters of
speculative decoding as vLLM reports them.

The rule, as vLLM v1's ``NgramProposer`` applies it: among the suffixes of the token ids whose
length n lies in ``[prompt_lookup_min, prompt_lookup_max]``, take the longest that also occurs
earlier in the ids (an occurrence ending before the last token; occurrences may overlap the
suffix); of its earlier occurrences, vLLM takes the *earliest* one; the draft is the (up to) k
tokens that follow that occurrence — fewer when the ids end first, or when the draft would pass
``max_model_len`` — and nothing when no suffix of at least ``prompt_lookup_min`` tokens matches.
vLLM finds it with a KMP failure function over the reversed ids; here the candidate occurrences
are the positions holding the last token, extended backwards together (numpy), which gives the
same longest length and position.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np


class NgramProposer:
    """Drafts up to ``k`` tokens per request from its own token ids (no model)."""

    def __init__(self, k: int, min_n: int, max_n: int, max_model_len: int) -> None:
        if k < 1 or min_n < 1 or max_n < min_n:
            raise ValueError(f"need k >= 1 and 1 <= min_n <= max_n, got {k}, {min_n}, {max_n}")
        self.k = k
        self.min_n = min_n
        self.max_n = max_n
        self.max_model_len = max_model_len

    def propose(self, tokens: Sequence[int], k: int | None = None) -> list[int]:
        """The draft for a request whose ids are ``tokens`` (prompt and output so far)."""
        total = len(tokens)
        k = min(self.k if k is None else k, self.max_model_len - total)
        if total < self.min_n or k <= 0:
            return []
        a = np.asarray(tokens, dtype=np.int64)
        ends = np.flatnonzero(a[: total - 1] == a[total - 1])  # earlier occurrences' last ids
        if ends.size == 0:
            return []
        length = np.ones(ends.size, dtype=np.int64)
        alive = np.arange(ends.size)
        for v in range(1, self.max_n):  # extend every still-matching occurrence by one token
            e = ends[alive] - v
            ok = e >= 0
            alive, e = alive[ok], e[ok]
            alive = alive[a[e] == a[total - 1 - v]]
            if alive.size == 0:
                break
            length[alive] += 1
        best = int(length.max())
        if best < self.min_n:
            return []
        start = int(ends[int(np.argmax(length == best))]) + 1  # the earliest longest match
        return a[start : start + k].tolist()


@dataclass
class SpecDecodeStats:
    """vLLM's speculative-decoding counters (``vllm:spec_decode_*``), counted by the verifier
    before stop rules cut a run (as vLLM counts them in its scheduler's update)."""

    num_drafts: int = 0
    """Verifications of a non-empty draft (one per request per step)."""
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    """Draft tokens accepted (the bonus or correction token is not counted)."""
    accepted_per_pos: list[int] = field(default_factory=list)
    """Accepted draft tokens at each draft position 0 … k − 1."""

    def observe(self, num_draft: int, num_accepted: int) -> None:
        self.num_drafts += 1
        self.num_draft_tokens += num_draft
        self.num_accepted_tokens += num_accepted
        if len(self.accepted_per_pos) < num_draft:
            self.accepted_per_pos.extend([0] * (num_draft - len(self.accepted_per_pos)))
        for i in range(num_accepted):
            self.accepted_per_pos[i] += 1

    @property
    def acceptance_rate(self) -> float:
        return self.num_accepted_tokens / self.num_draft_tokens if self.num_draft_tokens else 0.0
