"""Augmented requests: a prompt, then decode segments separated by external calls.

A request with K calls is ``prefill P → decode g_0 → call 0 → … → call K−1 → decode g_K``
(``docs/research/augserve.md`` §1.1, the segment structure of INFERCEPT's workload driver).
Call k lasts ``T_k`` ns and returns ``a_k`` tokens, which are appended to the context
(``Request.num_extra_tokens``) and prefilled like a prompt before decoding resumes.

Token accounting (vLLM v1 style, ``core/request.py``): the step that samples output token
number ``N_k = g_0 + … + g_k`` ends segment k; the request pauses holding
``computed = num_tokens − 1`` tokens of KV (the last sampled token is not yet computed). On
return, the deficit is ``1 + a_k`` tokens (plus the whole context if the KV was discarded);
the chunk that catches up samples the first token of segment k + 1. Hence every segment
decodes ``g_k ≥ 1`` tokens, and ``max_output_len = Σ g_k`` (returned tokens are not generated).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import accumulate

TOOLS: tuple[str, ...] = ("calculator", "qa", "ve", "chatbot", "image", "tts", "other")
"""Tool (augmentation) types; the index is the ``tool`` column of an augmented workload.
The first six are INFERCEPT's augmentations (docs/research/augserve.md §1.2)."""


def tool_index(name: str) -> int:
    try:
        return TOOLS.index(name)
    except ValueError:
        raise ValueError(f"unknown tool {name!r} (valid: {', '.join(TOOLS)})") from None


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One external call: decode ``decode_tokens`` tokens, then wait ``duration_ns`` for the
    call, which returns ``return_tokens`` tokens."""

    decode_tokens: int
    duration_ns: int
    return_tokens: int

    def __post_init__(self) -> None:
        if self.decode_tokens < 1:
            raise ValueError(f"decode_tokens must be >= 1, got {self.decode_tokens}")
        if self.duration_ns < 0:
            raise ValueError(f"duration_ns must be >= 0, got {self.duration_ns}")
        if self.return_tokens < 0:
            raise ValueError(f"return_tokens must be >= 0, got {self.return_tokens}")


@dataclass(frozen=True, slots=True)
class AugmentedSpec:
    """The true segment structure of one request (the simulator's ground truth; schedulers see
    it only through a predictor, docs/research/augserve.md §1.1 [DEF])."""

    calls: tuple[ToolCall, ...]
    final_decode: int
    tool: int = len(TOOLS) - 1
    """Index into :data:`TOOLS` of the request's augmentation type."""

    def __post_init__(self) -> None:
        if self.final_decode < 1:
            raise ValueError(f"final_decode must be >= 1, got {self.final_decode}")
        if not 0 <= self.tool < len(TOOLS):
            raise ValueError(f"tool index {self.tool} out of range")

    @property
    def num_calls(self) -> int:
        return len(self.calls)

    @property
    def total_decode(self) -> int:
        """Σ g_k: the request's generated (sampled) tokens."""
        return sum(c.decode_tokens for c in self.calls) + self.final_decode

    @property
    def total_return(self) -> int:
        return sum(c.return_tokens for c in self.calls)

    @property
    def call_ns(self) -> int:
        """Σ T_k: time spent waiting on external calls."""
        return sum(c.duration_ns for c in self.calls)

    def call_points(self) -> list[int]:
        """Output-token counts at which the request pauses: ``N_k = g_0 + … + g_k``."""
        return list(accumulate(c.decode_tokens for c in self.calls))

    def context_at_call(self, prompt_len: int, k: int) -> int:
        """Tokens in the context when call k starts (prompt + decoded + earlier returns)."""
        g = sum(c.decode_tokens for c in self.calls[: k + 1])
        a = sum(c.return_tokens for c in self.calls[:k])
        return prompt_len + g + a

    def total_context(self, prompt_len: int) -> int:
        return prompt_len + self.total_decode + self.total_return
