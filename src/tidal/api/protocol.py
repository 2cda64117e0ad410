"""OpenAI request bodies (the subset Tidal serves) and response objects.

Unknown fields are ignored, as OpenAI-compatible servers do, so that clients sending newer
parameters keep working. Known parameters whose non-default values Tidal cannot honour are
refused with a 400 naming the parameter (``param``) rather than silently ignored: ``n > 1``,
``best_of > 1``, ``logprobs``/``top_logprobs``, ``echo``, ``suffix``, penalties
(presence, frequency, repetition), ``min_p``, ``logit_bias``, a ``response_format`` other than
text, guided decoding, ``tools``/``tool_choice``/``functions``. Implemented beyond OpenAI's set,
as vLLM names them: ``top_k``, ``min_tokens``, ``stop_token_ids``, ``ignore_eos``. ``seed`` is a
signed 64-bit integer (vLLM's range); outside it, 400.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from tidal.runtime.sampling import SEED_MAX, SEED_MIN


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore")


class StreamOptions(_Body):
    include_usage: bool = False


def _off(name: str, value: Any, default: Any = None) -> Any:
    """Refuse a non-default value of a parameter the engine does not implement."""
    if value is not None and value != default and value not in ({}, [], ""):
        fix = "omit it" if default is None else f"omit it or use {json.dumps(default)}"
        raise ValueError(f"{name} is not supported by this server ({fix})")
    return value


class _Sampling(_Body):
    model: str
    temperature: float | None = Field(default=None, ge=0, le=2)
    """OpenAI's default is 1; 0 is greedy."""
    top_p: float | None = Field(default=None, gt=0, le=1)
    top_k: int = Field(default=0, ge=-1)
    """vLLM's extension: sample among the k most likely tokens (0 or -1: all)."""
    min_tokens: int = Field(default=0, ge=0)
    """vLLM's extension: no stop token or stop string ends the output before this many tokens."""
    n: int = 1
    best_of: int | None = None
    seed: int | None = Field(default=None, ge=SEED_MIN, le=SEED_MAX)
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    """vLLM's extension: token ids that end the output (finish_reason "stop")."""
    stream: bool = False
    stream_options: StreamOptions | None = None
    presence_penalty: float | None = 0.0
    frequency_penalty: float | None = 0.0
    repetition_penalty: float | None = None
    min_p: float | None = None
    logprobs: Any = None
    top_logprobs: int | None = None
    logit_bias: dict[str, Any] | None = None
    response_format: dict[str, Any] | None = None
    tools: list[Any] | None = None
    tool_choice: Any = None
    functions: list[Any] | None = None
    function_call: Any = None
    guided_json: Any = None
    guided_regex: Any = None
    guided_choice: Any = None
    guided_grammar: Any = None
    structured_outputs: Any = None
    ignore_eos: bool = False
    """vLLM's extension: keep generating past the end-of-sequence token."""

    @field_validator("n", "best_of")
    @classmethod
    def _one(cls, v: int | None, info: Any) -> int | None:
        if v is not None and v != 1:
            raise ValueError(f"only {info.field_name} = 1 is supported")
        return v

    @field_validator("presence_penalty", "frequency_penalty", "min_p", "top_logprobs")
    @classmethod
    def _zero(cls, v: Any, info: Any) -> Any:
        return _off(info.field_name, v, 0)

    @field_validator("repetition_penalty")
    @classmethod
    def _unit(cls, v: Any, info: Any) -> Any:
        return _off(info.field_name, v, 1.0)

    @field_validator("logprobs")
    @classmethod
    def _logprobs(cls, v: Any) -> Any:
        if v not in (None, False, 0):
            raise ValueError("not supported by this server (omit it or use false)")
        return v

    @field_validator(
        "logit_bias",
        "tools",
        "functions",
        "guided_json",
        "guided_regex",
        "guided_choice",
        "guided_grammar",
        "structured_outputs",
    )
    @classmethod
    def _none(cls, v: Any, info: Any) -> Any:
        return _off(info.field_name, v)

    @field_validator("response_format")
    @classmethod
    def _text_only(cls, v: dict[str, Any] | None) -> dict[str, Any] | None:
        if v is not None and v.get("type", "text") != "text":
            raise ValueError('only {"type": "text"} is supported (no JSON mode)')
        return v

    @field_validator("tool_choice", "function_call")
    @classmethod
    def _no_tool_choice(cls, v: Any, info: Any) -> Any:
        if v not in (None, "none", "auto"):
            raise ValueError("not supported by this server (no tool calling; omit it)")
        return v

    @field_validator("stop")
    @classmethod
    def _stops(cls, v: str | list[str] | None) -> str | list[str] | None:
        if isinstance(v, list) and len(v) > 4:
            raise ValueError("at most 4 stop sequences")
        return v

    @property
    def stop_list(self) -> list[str]:
        if self.stop is None:
            return []
        stops = [self.stop] if isinstance(self.stop, str) else self.stop
        return [s for s in stops if s]


class CompletionRequest(_Sampling):
    prompt: str | list[str] | list[int] | list[list[int]]
    max_tokens: int | None = Field(default=16, ge=1)
    echo: bool = False
    suffix: str | None = None

    @field_validator("prompt")
    @classmethod
    def _one_prompt(cls, p: Any) -> Any:
        if isinstance(p, list) and p and isinstance(p[0], str | list) and len(p) != 1:
            raise ValueError("one prompt per request (batched prompts are not supported)")
        return p

    @field_validator("echo", "suffix")
    @classmethod
    def _no_echo(cls, v: Any, info: Any) -> Any:
        return _off(info.field_name, v, False if info.field_name == "echo" else None)


class ContentPart(_Body):
    type: Literal["text"]
    text: str


class ChatMessage(_Body):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None

    def text(self) -> str:
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(p.text for p in self.content)


class ChatCompletionRequest(_Sampling):
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)


# ---------------------------------------------------------------------- responses
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


def completion(
    rid: str, created: int, model: str, text: str, finish: str | None, use: dict | None
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": rid,
        "object": "text_completion",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish}],
    }
    if use is not None:
        out["usage"] = use
    return out


def chat_completion(
    rid: str, created: int, model: str, text: str, finish: str | None, use: dict
) -> dict[str, Any]:
    return {
        "id": rid,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "logprobs": None,
                "finish_reason": finish,
            }
        ],
        "usage": use,
    }


def chat_chunk(
    rid: str, created: int, model: str, delta: dict[str, str], finish: str | None
) -> dict[str, Any]:
    return {
        "id": rid,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
    }


def usage_chunk(obj: str, rid: str, created: int, model: str, use: dict) -> dict[str, Any]:
    return {
        "id": rid,
        "object": obj,
        "created": created,
        "model": model,
        "choices": [],
        "usage": use,
    }
