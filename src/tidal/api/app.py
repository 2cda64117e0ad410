"""The OpenAI-compatible HTTP API over an :class:`~tidal.runtime.driver.EngineDriver`.

Routes: ``POST /v1/completions`` and ``POST /v1/chat/completions`` (JSON, or server-sent events
with ``stream: true`` ending in ``data: [DONE]``; ``stream_options.include_usage`` adds a usage
chunk; ``n`` samples, a list of prompts, ``echo`` and ``logprobs``: :mod:`tidal.api.generate`),
``GET /v1/models``, ``GET /health``, ``GET /metrics`` (Prometheus text, :mod:`.metrics`), and
vLLM's ``GET /version``, ``POST /tokenize`` and ``POST /detokenize``. ``model`` may be omitted
(the served model, as vLLM).

Behaviour at the edges:
* before routing or parsing (:mod:`tidal.api.guard`): an API key, when set, is required as
  ``Authorization: Bearer KEY`` on ``/v1/*`` and, unless ``public_meta``, on ``/metrics`` and the
  OpenAPI docs (401); a body over ``max_body_bytes`` gets 413 while it is being read;
* backpressure: at most ``max_queue`` requests wait for admission, at most ``max_streams``
  streamed requests run at once; beyond, 429 with ``Retry-After``;
* a client that disconnects, streaming or not, aborts its request: the engine frees its KV at
  the next step boundary;
* malformed bodies get 400 with an OpenAI-style error naming the field; an unknown model 404;
  text that is not valid Unicode (a lone surrogate) and a chat the model's template refuses
  (its ``raise_exception``) 400 with the reason;
  a prompt that fills the context 400 naming the prompt, a prompt plus ``max_tokens`` beyond it
  400 naming ``max_tokens`` (``context_length_exceeded``, as vLLM);
* stop sequences are matched in the engine thread on the detokenised text
  (:mod:`tidal.api.stops`), so a request they end finishes ``stop`` at that step; the
  end-of-sequence token (and ``stop_token_ids``) stops a request unless ``ignore_eos``;
* an engine fault fails the requests it touched with 500 (``engine_error``) and the engine goes
  on; ``/health`` answers 503 once the engine thread is dead.
"""

from __future__ import annotations

import json
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse

import tidal
from tidal.api import protocol as proto
from tidal.api import responses as resp
from tidal.api.errors import APIError, error_body, install
from tidal.api.generate import Batch, Delta, submit_batch
from tidal.api.guard import Guard
from tidal.api.metrics import EngineMetrics
from tidal.runtime.driver import EngineDriver, RequestHandle
from tidal.runtime.hf_tokenizer import ChatTemplateError, HFTokenizer, IncrementalHFDecoder
from tidal.runtime.tokenizer import ByteTokenizer, IncrementalDecoder

DEFAULT_MAX_BODY_BYTES = 8 << 20
"""8 MiB: a 128k-token prompt as JSON token ids is ~1 MB."""


class ServerState:
    def __init__(
        self,
        driver: EngineDriver,
        tokenizer: ByteTokenizer | HFTokenizer,
        model_name: str,
        api_key: str | None,
        max_queue: int,
        default_max_tokens: int,
        max_streams: int | None = None,
    ) -> None:
        self.driver = driver
        self.tokenizer = tokenizer
        self.model_name = model_name
        self.api_key = api_key
        self.max_queue = max_queue
        self.default_max_tokens = default_max_tokens
        self.max_streams = max_streams
        self.metrics = EngineMetrics(driver, model_name)
        self.created = resp.now_s()
        self.streams = 0
        self.lifespans = 0
        """Streamed requests submitted and not yet ended in the engine."""
        self._lock = threading.Lock()
        driver.done_callbacks.append(self._on_done)

    def new_decoder(self) -> IncrementalDecoder | IncrementalHFDecoder:
        return self.tokenizer.decoder()

    def count_stream(self, delta: int) -> None:
        with self._lock:
            self.streams += delta

    def _on_done(self, h: RequestHandle) -> None:
        if h.extra.get("stream"):
            self.count_stream(-1)


def create_app(
    driver: EngineDriver,
    model_name: str,
    api_key: str | None = None,
    max_queue: int = 1024,
    default_max_tokens: int = 256,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    public_meta: bool = False,
    max_streams: int | None = None,
    tokenizer: ByteTokenizer | HFTokenizer | None = None,
) -> FastAPI:
    """``tokenizer``: the model's (:func:`tidal.runtime.hf_tokenizer.tokenizer_for`); the byte
    tokenizer by default."""
    vocab = driver.runner.model.config.vocab_size  # type: ignore[attr-defined]
    state = ServerState(
        driver,
        tokenizer or ByteTokenizer(vocab),
        model_name,
        api_key,
        max_queue,
        default_max_tokens,
        max_streams,
    )

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        """Starts the engine; the last of overlapping lifespans (test clients) stops it."""
        state.lifespans += 1
        driver.start()
        try:
            yield
        finally:
            state.lifespans -= 1
            if state.lifespans == 0:
                driver.stop()

    app = FastAPI(title="Tidal", lifespan=lifespan)
    app.state.tidal = state
    install(app)
    app.add_middleware(
        Guard, api_key=api_key, max_body_bytes=max_body_bytes, public_meta=public_meta
    )

    @app.get("/health")
    async def health() -> JSONResponse:
        """200 while the engine thread runs; 503 (and why) once it has stopped."""
        if not driver.alive:
            why = f": {driver.failure!r}" if driver.failure is not None else ""
            return JSONResponse({"status": f"engine stopped{why}"}, 503)
        return JSONResponse({"status": "ok"})

    @app.get("/metrics")
    async def metrics() -> PlainTextResponse:
        # lazy: optional dependency (prometheus_client)
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return PlainTextResponse(
            generate_latest(state.metrics.registry), 200, None, CONTENT_TYPE_LATEST
        )

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        card = {
            "id": state.model_name,
            "object": "model",
            "created": state.created,
            "owned_by": "tidal",
            "max_model_len": driver.rt.max_model_len,
        }
        return {"object": "list", "data": [card]}


    @app.get("/version")
    async def version() -> dict[str, str]:
        """vLLM's ``/version``: the server's version."""
        return {"version": tidal.__version__}

    @app.post("/tokenize")
    async def tokenize(body: proto.TokenizeRequest) -> dict[str, Any]:
        """vLLM's ``/tokenize``: the ids a completion (``prompt``) or a chat (``messages``)
        would be given, their count and the context length."""
        _check_model(state, body.model)
        if body.messages is not None:
            ids = _chat_ids(state, body.messages)
        else:
            assert body.prompt is not None
            add = body.add_special_tokens is not False
            ids = state.tokenizer.encode(body.prompt, add_bos=add)
        return {
            "count": len(ids),
            "max_model_len": driver.rt.max_model_len,
            "tokens": ids,
            "token_strs": None,
        }

    @app.post("/detokenize")
    async def detokenize(body: proto.DetokenizeRequest) -> dict[str, Any]:
        """vLLM's ``/detokenize``: the text of token ids (special tokens skipped)."""
        _check_model(state, body.model)
        _check_ids(state, body.tokens, "tokens")
        return {"prompt": state.tokenizer.decode(body.tokens)}

    @app.post("/v1/completions")
    async def completions(body: proto.CompletionRequest, request: Request) -> Any:
        _check_model(state, body.model)
        prompts = [_prompt_ids(state, p) for p in body.prompts()]
        prefixes = None
        if body.echo:
            dec = state.tokenizer.decode
            prefixes = [p if isinstance(p, str) else dec(p) for p in body.prompts()]
        max_tokens = body.max_tokens or 16
        batch = submit_batch(state, prompts, max_tokens, body, request, "prompt", prefixes)
        return await _completion_response(state, body, batch)

    @app.post("/v1/chat/completions")
    async def chat(body: proto.ChatCompletionRequest, request: Request) -> Any:
        _check_model(state, body.model)
        ids = _chat_ids(state, body.messages)
        room = driver.rt.max_model_len - len(ids)
        max_tokens = body.max_completion_tokens or body.max_tokens
        if max_tokens is None:
            max_tokens = max(1, min(state.default_max_tokens, room))
        batch = submit_batch(state, [ids], max_tokens, body, request, "messages")
        return await _chat_response(state, body, batch)

    return app


# ---------------------------------------------------------------------- helpers
def _check_model(state: ServerState, model: str | None) -> None:
    """``model`` omitted means the served model (vLLM); another name is a 404."""
    if model is not None and model != state.model_name:
        raise APIError(
            404,
            f"model {model!r} does not exist; this server serves {state.model_name!r}",
            "model",
            "model_not_found",
        )


def _check_ids(state: ServerState, ids: list[int], param: str) -> None:
    vocab = state.tokenizer.vocab_size
    if not ids:
        raise APIError(400, f"{param}: empty", param)
    if any(not 0 <= t < vocab for t in ids):
        raise APIError(400, f"{param}: token ids must be in [0, {vocab})", param)


def _prompt_ids(state: ServerState, prompt: str | list[int]) -> list[int]:
    if isinstance(prompt, str):
        try:
            return state.tokenizer.encode(prompt)
        except (UnicodeError, TypeError, ValueError) as err:  # the validators let none through
            raise APIError(400, f"prompt: cannot be encoded ({err!r})", "prompt") from None
    ids = list(prompt)
    _check_ids(state, ids, "prompt")
    return ids


def _chat_ids(state: ServerState, messages: list[proto.ChatMessage]) -> list[int]:
    """The chat's prompt ids; a template that refuses the messages is a 400 with its reason."""
    try:
        return state.tokenizer.encode_chat({"role": m.role, "content": m.text()} for m in messages)
    except ChatTemplateError as err:
        raise APIError(400, str(err), "messages", "invalid_chat") from None
    except (UnicodeError, TypeError) as err:
        raise APIError(400, f"messages: cannot be encoded ({err!r})", "messages") from None


async def _completion_response(
    state: ServerState, body: proto.CompletionRequest, batch: Batch
) -> Any:
    rid, created, name = resp.new_id("cmpl"), resp.now_s(), state.model_name
    text_of = state.tokenizer.token_text
    want_lp = body.num_logprobs is not None

    def lp(entries: list[resp.TokenEntry]) -> dict[str, Any] | None:
        return resp.completion_logprobs(entries, text_of) if want_lp else None

    if body.stream:

        def chunk(d: Delta) -> dict[str, Any]:
            choice = resp.completion_choice(d.index, d.text, d.finish, lp(d.entries))
            return resp.completion(rid, created, name, [choice], _running_usage(body, batch))

        def usage() -> dict[str, Any]:
            return resp.usage_chunk("text_completion", rid, created, name, batch.usage())

        return _sse(batch, chunk, usage, _include_usage(body), [])
    results = await batch.collect()
    choices = [
        resp.completion_choice(i, text, finish, lp(entries))
        for i, (text, finish, entries) in enumerate(results)
    ]
    return resp.completion(rid, created, name, choices, batch.usage())


async def _chat_response(
    state: ServerState, body: proto.ChatCompletionRequest, batch: Batch
) -> Any:
    rid, created, name = resp.new_id("chatcmpl"), resp.now_s(), state.model_name
    text_of = state.tokenizer.token_text
    want_lp = body.num_logprobs is not None

    def lp(entries: list[resp.TokenEntry]) -> dict[str, Any] | None:
        return resp.chat_logprobs(entries, text_of) if want_lp else None

    if body.stream:

        def chunk(d: Delta) -> dict[str, Any]:
            delta = {"content": d.text} if d.text or d.finish is None else {}
            out = resp.chat_chunk(rid, created, name, d.index, delta, d.finish, lp(d.entries))
            use = _running_usage(body, batch)
            if use is not None:
                out["usage"] = use
            return out

        def usage() -> dict[str, Any]:
            return resp.usage_chunk("chat.completion.chunk", rid, created, name, batch.usage())

        first = [
            resp.chat_chunk(rid, created, name, g.index, {"role": "assistant", "content": ""}, None)
            for g in batch.gens
        ]
        return _sse(batch, chunk, usage, _include_usage(body), first)
    results = await batch.collect()
    choices = [
        resp.chat_choice(i, text, finish, lp(entries))
        for i, (text, finish, entries) in enumerate(results)
    ]
    return resp.chat_completion(rid, created, name, choices, batch.usage())


def _include_usage(body: proto._Sampling) -> bool:
    return bool(body.stream_options and body.stream_options.include_usage)


def _running_usage(body: proto._Sampling, batch: Batch) -> dict[str, Any] | None:
    """The usage so far, in every chunk with ``include_usage`` and ``continuous_usage_stats``
    (vLLM's option)."""
    so = body.stream_options
    if so is not None and so.include_usage and so.continuous_usage_stats:
        return batch.usage()
    return None


def _sse(
    batch: Batch,
    chunk: Callable[[Delta], dict[str, Any]],
    usage: Callable[[], dict[str, Any]],
    include_usage: bool,
    first: list[dict[str, Any]],
) -> StreamingResponse:
    async def stream() -> AsyncIterator[str]:
        for f in first:
            yield _event(f)
        try:
            async for d in batch.stream():
                yield _event(chunk(d))
        except APIError as err:
            yield _event(error_body(err.status, err.message, err.param, err.code))
        if include_usage:
            yield _event(usage())
        yield "data: [DONE]\n\n"

    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    return StreamingResponse(stream(), media_type="text/event-stream", headers=headers)


def _event(obj: dict[str, Any]) -> str:
    return f"data: {json.dumps(obj, separators=(',', ':'))}\n\n"
