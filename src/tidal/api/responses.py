"""OpenAI response objects (completions, chat, their stream chunks, usage, logprobs).

A response holds one choice per (prompt, sample): choice ``index = prompt × n + sample``, as
vLLM numbers them. Logprobs take OpenAI's two shapes: completions' legacy lists
(``tokens``, ``token_logprobs``, ``top_logprobs`` — a dict per token holding the sampled token
and its ``logprobs`` most likely alternatives — and ``text_offset``), and chat's ``content``
list of ``{token, logprob, bytes, top_logprobs}``.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tidal.runtime.sampling import TokenLogprobs

TokenText = Callable[[int], tuple[str, bytes]]
"""A token id's text and bytes (the tokenizer's ``token_text``)."""


@dataclass(frozen=True, slots=True)
class TokenEntry:
    """One output token with its logprobs and its character offset in the choice's text."""

    token: int
    logprobs: TokenLogprobs
    offset: int


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


def now_s() -> int:
    return int(time.time())


def usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0) -> dict[str, Any]:
    """OpenAI usage; ``prompt_tokens_details.cached_tokens``: prompt tokens found in the prefix
    cache (as vLLM reports them)."""
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": cached_tokens},
    }


def completion_logprobs(entries: Sequence[TokenEntry], text: TokenText) -> dict[str, Any]:
    tokens, lps, tops, offsets = [], [], [], []
    for e in entries:
        s = text(e.token)[0]
        tokens.append(s)
        lps.append(e.logprobs[0])
        top = {text(t)[0]: v for t, v in e.logprobs[1]}
        top.setdefault(s, e.logprobs[0])
        tops.append(top)
        offsets.append(e.offset)
    return {"tokens": tokens, "token_logprobs": lps, "top_logprobs": tops, "text_offset": offsets}


def chat_logprobs(entries: Sequence[TokenEntry], text: TokenText) -> dict[str, Any]:
    def item(token: int, lp: float) -> dict[str, Any]:
        s, b = text(token)
        return {"token": s, "logprob": lp, "bytes": list(b)}

    content = [
        {**item(e.token, e.logprobs[0]), "top_logprobs": [item(t, v) for t, v in e.logprobs[1]]}
        for e in entries
    ]
    return {"content": content}


def _envelope(obj: str, rid: str, created: int, model: str, choices: list) -> dict[str, Any]:
    return {"id": rid, "object": obj, "created": created, "model": model, "choices": choices}


def completion(
    rid: str, created: int, model: str, choices: list[dict[str, Any]], use: dict | None
) -> dict[str, Any]:
    """``choices``: ``completion_choice`` objects (a stream chunk when ``use`` is None)."""
    out = _envelope("text_completion", rid, created, model, choices)
    if use is not None:
        out["usage"] = use
    return out


def completion_choice(
    index: int, text: str, finish: str | None, logprobs: dict[str, Any] | None
) -> dict[str, Any]:
    return {"index": index, "text": text, "logprobs": logprobs, "finish_reason": finish}


def chat_completion(
    rid: str, created: int, model: str, choices: list[dict[str, Any]], use: dict
) -> dict[str, Any]:
    out = _envelope("chat.completion", rid, created, model, choices)
    out["usage"] = use
    return out


def chat_choice(
    index: int, text: str, finish: str | None, logprobs: dict[str, Any] | None
) -> dict[str, Any]:
    return {
        "index": index,
        "message": {"role": "assistant", "content": text},
        "logprobs": logprobs,
        "finish_reason": finish,
    }


def chat_chunk(
    rid: str,
    created: int,
    model: str,
    index: int,
    delta: dict[str, str],
    finish: str | None,
    logprobs: dict[str, Any] | None = None,
) -> dict[str, Any]:
    choice = {"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": finish}
    return _envelope("chat.completion.chunk", rid, created, model, [choice])


def usage_chunk(obj: str, rid: str, created: int, model: str, use: dict) -> dict[str, Any]:
    out = _envelope(obj, rid, created, model, [])
    out["usage"] = use
    return out
