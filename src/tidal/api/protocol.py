"""OpenAI request bodies (the subset Tidal serves; responses: :mod:`tidal.api.responses`).

Unknown fields are ignored, as OpenAI-compatible servers do, so that clients sending newer
parameters keep working. Known parameters whose non-default values Tidal cannot honour are
refused with a 400 naming the parameter (``param``) rather than silently ignored:
``best_of > 1``, ``suffix``, penalties (presence, frequency, repetition), ``min_p``,
``logit_bias``, a ``response_format`` other than text, guided decoding,
``tools``/``tool_choice``/``functions``, and ``echo`` together with ``logprobs`` (prompt
logprobs). Implemented: ``n`` (1–``MAX_N`` samples per prompt), a list of prompts (completions,
up to ``MAX_PROMPTS``), ``echo``, ``logprobs`` (completions: an int, the top-k size, as OpenAI;
chat: ``logprobs: true`` with ``top_logprobs``; at most ``MAX_LOGPROBS``, vLLM's default
``max_logprobs``), and beyond OpenAI's set, as vLLM names them: ``top_k``, ``min_tokens``,
``stop_token_ids``, ``ignore_eos``. ``model`` is optional (vLLM: the served model).
``seed`` is a signed 64-bit integer (vLLM's range); outside it, 400.

Input text is validated before it reaches a tokenizer: a string that is not valid Unicode (a
lone surrogate such as ``"\\ud800"``, which JSON can carry) is a 400 naming the field; token
ids are JSON integers (``true``/``false`` and ``1.0`` are refused, not read as 1, 0 and 1).
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, field_validator, model_validator

from tidal.runtime.sampling import SEED_MAX, SEED_MIN

MAX_N = 64
"""Samples per prompt (``n``) at most."""
MAX_PROMPTS = 256
"""Prompts in one completions request at most."""
MAX_LOGPROBS = 20
"""Top logprobs per token at most (vLLM's default ``max_logprobs``)."""

TokenIds = list[StrictInt]


def check_text(value: str) -> str:
    """``value``, or ValueError when it is not valid Unicode (a lone surrogate): a tokenizer
    could not encode it, and the reply could not be encoded as UTF-8 JSON either."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as err:
        bad = value[err.start : err.end].encode("unicode_escape").decode("ascii")
        raise ValueError(
            f"not valid Unicode text: a lone surrogate ({bad}) at character {err.start}; "
            "send UTF-8 text (a surrogate pair must be complete)"
        ) from None
    return value


def _texts(value: Any) -> Any:
    """Check every string in ``value`` (a string or a list of them)."""
    if isinstance(value, str):
        check_text(value)
    elif isinstance(value, list):
        for v in value:
            if isinstance(v, str):
                check_text(v)
    return value


def _ids(value: Any) -> bool:
    """A list of JSON integers (``bool`` is not one, though Python counts it as an int)."""
    return isinstance(value, list) and all(
        isinstance(x, int) and not isinstance(x, bool) for x in value
    )


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore")


class StreamOptions(_Body):
    include_usage: bool = False
    continuous_usage_stats: bool = False
    """vLLM's: every chunk carries the usage so far."""


def _off(name: str, value: Any, default: Any = None) -> Any:
    """Refuse a non-default value of a parameter the engine does not implement."""
    if value is not None and value != default and value not in ({}, [], ""):
        fix = "omit it" if default is None else f"omit it or use {json.dumps(default)}"
        raise ValueError(f"{name} is not supported by this server ({fix})")
    return value


class _Sampling(_Body):
    model: str | None = None
    """The served model's name; omitted, the served model (vLLM)."""
    temperature: float | None = Field(default=None, ge=0, le=2)
    """OpenAI's default is 1; 0 is greedy."""
    top_p: float | None = Field(default=None, gt=0, le=1)
    top_k: int = Field(default=0, ge=-1)
    """vLLM's extension: sample among the k most likely tokens (0 or -1: all)."""
    min_tokens: int = Field(default=0, ge=0)
    """vLLM's extension: no stop token or stop string ends the output before this many tokens."""
    n: int = Field(default=1, ge=1, le=MAX_N)
    best_of: int | None = None
    seed: int | None = Field(default=None, ge=SEED_MIN, le=SEED_MAX)
    stop: str | list[str] | None = None
    stop_token_ids: TokenIds | None = None
    """vLLM's extension: token ids that end the output (finish_reason "stop")."""
    stream: bool = False
    stream_options: StreamOptions | None = None
    presence_penalty: float | None = 0.0
    frequency_penalty: float | None = 0.0
    repetition_penalty: float | None = None
    min_p: float | None = None
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

    @field_validator("best_of")
    @classmethod
    def _one(cls, v: int | None, info: Any) -> int | None:
        if v is not None and v != 1:
            raise ValueError(f"only {info.field_name} = 1 is supported (use n for samples)")
        return v

    @field_validator("presence_penalty", "frequency_penalty", "min_p")
    @classmethod
    def _zero(cls, v: Any, info: Any) -> Any:
        return _off(info.field_name, v, 0)

    @field_validator("repetition_penalty")
    @classmethod
    def _unit(cls, v: Any, info: Any) -> Any:
        return _off(info.field_name, v, 1.0)

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
        return _texts(v)

    @property
    def num_logprobs(self) -> int | None:
        """Top logprobs per output token (0: the sampled token's only); None: no logprobs."""
        return None

    @property
    def stop_list(self) -> list[str]:
        if self.stop is None:
            return []
        stops = [self.stop] if isinstance(self.stop, str) else self.stop
        return [s for s in stops if s]


class CompletionRequest(_Sampling):
    prompt: str | list[str] | TokenIds | list[TokenIds]
    max_tokens: int | None = Field(default=16, ge=1)
    echo: bool = False
    suffix: str | None = None
    logprobs: StrictInt | None = Field(default=None, ge=0, le=MAX_LOGPROBS)
    """OpenAI completions: the top-k size per token (0: the sampled token's logprob only)."""
    top_logprobs: Any = None

    @field_validator("prompt", mode="before")
    @classmethod
    def _prompt_shape(cls, p: Any) -> Any:
        """One error for any other shape (not one per member of the union)."""
        if isinstance(p, str) or _ids(p):
            return p
        if isinstance(p, list) and p and (
            all(isinstance(x, str) for x in p) or all(_ids(x) for x in p)
        ):
            return p
        raise ValueError(
            "must be a string, a list of strings, a list of token ids (JSON integers: true, "
            "false and 1.0 are not token ids) or a list of token-id lists"
        )

    @field_validator("prompt")
    @classmethod
    def _prompts(cls, p: Any) -> Any:
        if isinstance(p, list) and p and isinstance(p[0], str | list) and len(p) > MAX_PROMPTS:
            raise ValueError(f"at most {MAX_PROMPTS} prompts per request, got {len(p)}")
        return _texts(p)

    @field_validator("suffix")
    @classmethod
    def _no_suffix(cls, v: Any, info: Any) -> Any:
        return _off(info.field_name, v)

    @field_validator("top_logprobs")
    @classmethod
    def _no_top(cls, v: Any, info: Any) -> Any:
        if v not in (None, 0):
            raise ValueError("completions take logprobs: N (top_logprobs is chat's parameter)")
        return v

    @model_validator(mode="after")
    def _no_prompt_logprobs(self) -> CompletionRequest:
        if self.echo and self.logprobs is not None:
            raise ValueError(
                "echo: echo with logprobs (prompt logprobs) is not supported; drop one of them"
            )
        return self

    @property
    def num_logprobs(self) -> int | None:
        return self.logprobs

    def prompts(self) -> list[str] | list[list[int]]:
        """The request's prompts: one text or token-id list each."""
        p = self.prompt
        if isinstance(p, str):
            return [p]
        if p and isinstance(p[0], str | list):
            return p  # type: ignore[return-value]
        return [p]  # type: ignore[return-value]


class ContentPart(_Body):
    type: Literal["text"]
    text: str

    @field_validator("text")
    @classmethod
    def _text(cls, v: str) -> str:
        return check_text(v)


class ChatMessage(_Body):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None

    @field_validator("content")
    @classmethod
    def _content(cls, v: Any) -> Any:
        return _texts(v)

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
    logprobs: bool | None = None
    """OpenAI chat: return the sampled tokens' logprobs (and ``top_logprobs`` alternatives)."""
    top_logprobs: StrictInt | None = Field(default=None, ge=0, le=MAX_LOGPROBS)

    @model_validator(mode="after")
    def _top_needs_logprobs(self) -> ChatCompletionRequest:
        if self.top_logprobs and not self.logprobs:
            raise ValueError("top_logprobs: needs logprobs: true")
        return self

    @property
    def num_logprobs(self) -> int | None:
        return (self.top_logprobs or 0) if self.logprobs else None


class TokenizeRequest(_Body):
    """vLLM's ``POST /tokenize``: a completion ``prompt`` or chat ``messages`` (one of them)."""

    model: str | None = None
    prompt: str | None = None
    messages: list[ChatMessage] | None = None
    add_special_tokens: bool | None = None
    """Completion prompt: add BOS as a completion does (default true); chat: not allowed (the
    template writes the special tokens)."""
    add_generation_prompt: bool = True

    @field_validator("prompt")
    @classmethod
    def _text(cls, v: str | None) -> str | None:
        return v if v is None else check_text(v)

    @field_validator("add_generation_prompt")
    @classmethod
    def _gen(cls, v: bool) -> bool:
        if not v:
            raise ValueError("only true is supported (the chat as a completion would see it)")
        return v

    @model_validator(mode="after")
    def _one_input(self) -> TokenizeRequest:
        if (self.prompt is None) == (self.messages is None):
            raise ValueError("prompt: give prompt or messages (one of them)")
        if self.messages is not None and self.add_special_tokens:
            raise ValueError("add_special_tokens: not with messages (the template adds them)")
        return self


class DetokenizeRequest(_Body):
    model: str | None = None
    tokens: TokenIds
