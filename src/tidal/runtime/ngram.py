"""N-gram (prompt lookup) drafting: vLLM's ``ngram`` speculative proposer, and the counters of
speculative decoding as vLLM reports them.

The rule, as vLLM v1's ``NgramProposer`` applies it: among the suffixes of the token ids whose
length n lies in ``[prompt_lookup_min, prompt_lookup_max]``, take the longest that also occurs
earlier in the ids (an occurrence ending before the last token; occurrences may overlap the
suffix); of its earlier occurrences, vLLM takes the *earliest* one; the draft is the (up to) k
tokens that follow that occurrence — fewer when the ids end first, or when the draft would pass
``max_model_len`` — and nothing when no suffix of at least ``prompt_lookup_min`` tokens matches.
vLLM finds it with a KMP failure function over the reversed ids; here each earlier position of
the last token (found by ``list.index``, earliest first) is extended backwards up to
``prompt_lookup_max`` tokens, stopping at the first occurrence of that length — the same
longest length and position.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field


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
        ids = tokens if isinstance(tokens, list) else list(tokens)
        last, hi = ids[-1], self.max_n
        best, start, e = 0, -1, -1
        while best < hi:  # earlier occurrences of the last token, earliest first (C-speed scan)
            try:
                e = ids.index(last, e + 1, total - 1)
            except ValueError:
                break
            v = 1
            while v < hi and v <= e and ids[e - v] == ids[total - 1 - v]:
                v += 1
            if v > best:  # strictly longer: ties keep the earliest occurrence
                best, start = v, e + 1
        if best < self.min_n:
            return []
        return list(ids[start : start + k])


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
