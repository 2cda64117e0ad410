"""The OpenAI-compatible HTTP API over an :class:`~tidal.runtime.driver.EngineDriver`.

Routes: ``POST /v1/completions`` and ``POST /v1/chat/completions`` (JSON, or server-sent events
with ``stream: true`` ending in ``data: [DONE]``; ``stream_options.include_usage`` adds a usage
chunk), ``GET /v1/models``, ``GET /health``, ``GET /metrics`` (Prometheus text).

Behaviour at the edges:
* before routing or parsing (:mod:`tidal.api.guard`): an API key, when set, is required as
  ``Authorization: Bearer KEY`` on ``/v1/*`` and, unless ``public_meta``, on ``/metrics`` and the
  OpenAPI docs (401); a body over ``max_body_bytes`` gets 413 while it is being read;
* backpressure: at most ``max_queue`` requests wait for admission, at most ``max_streams``
  streamed requests run at once; beyond, 429 with ``Retry-After``;
* a client that disconnects, streaming or not, aborts its request: the engine frees its KV at
  the next step boundary;
* malformed bodies get 400 with an OpenAI-style error naming the field; an unknown model 404;
  a prompt that fills the context 400 naming the prompt, a prompt plus ``max_tokens`` beyond it
  400 naming ``max_tokens`` (``context_length_exceeded``, as vLLM);
* stop sequences are matched in the engine thread on the detokenised text
  (:mod:`tidal.api.stops`), so a request they end finishes ``stop`` at that step; the
  end-of-sequence token (and ``stop_token_ids``) stops a request unless ``ignore_eos``;
* an engine fault fails the requests it touched with 500 (``engine_error``) and the engine goes
  on; ``/health`` answers 503 once the engine thread is dead.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse

from tidal.api import protocol as proto
from tidal.api.errors import APIError, install
from tidal.api.guard import Guard
from tidal.api.metrics import EngineMetrics
from tidal.api.stops import StopStrings
from tidal.runtime.driver import EngineDriver, RequestHandle
from tidal.runtime.sampling import SamplingParams
from tidal.runtime.tokenizer import ByteTokenizer, IncrementalDecoder

DEFAULT_MAX_BODY_BYTES = 8 << 20
"""8 MiB: a 128k-token prompt as JSON token ids is ~1 MB."""
RETRY_AFTER_S = "1"


class ServerState:
    def __init__(
        self,
        driver: EngineDriver,
        tokenizer: ByteTokenizer,
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
        self.metrics = EngineMetrics(driver)
        self.created = proto.now_s()
        self.streams = 0
        self.lifespans = 0
        """Streamed requests submitted and not yet ended in the engine."""
        self._lock = threading.Lock()
        driver.done_callbacks.append(self._on_done)

    def new_decoder(self) -> IncrementalDecoder:
        return IncrementalDecoder()

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
) -> FastAPI:
    vocab = driver.runner.model.config.vocab_size  # type: ignore[attr-defined]
    state = ServerState(
        driver,
        ByteTokenizer(vocab),
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

    @app.post("/v1/completions")
    async def completions(body: proto.CompletionRequest, request: Request) -> Any:
        _check_model(state, body.model)
        ids = _prompt_ids(state, body.prompt)
        max_tokens = body.max_tokens or 16
        gen = _submit(state, ids, max_tokens, body, request, "prompt")
        rid, created = proto.new_id("cmpl"), proto.now_s()
        if body.stream:
            include_usage = bool(body.stream_options and body.stream_options.include_usage)

            def chunk(text: str, finish: str | None) -> dict[str, Any]:
                return proto.completion(rid, created, state.model_name, text, finish, None)

            return _sse(
                gen,
                chunk,
                lambda: proto.usage_chunk(
                    "text_completion", rid, created, state.model_name, gen.usage()
                ),
                include_usage,
                None,
            )
        text, finish = await gen.collect()
        return proto.completion(rid, created, state.model_name, text, finish, gen.usage())

    @app.post("/v1/chat/completions")
    async def chat(body: proto.ChatCompletionRequest, request: Request) -> Any:
        _check_model(state, body.model)
        tok = state.tokenizer
        prompt = tok.apply_chat_template(
            {"role": m.role, "content": m.text()} for m in body.messages
        )
        ids = tok.encode(prompt)
        room = driver.rt.max_model_len - len(ids)
        max_tokens = body.max_completion_tokens or body.max_tokens
        if max_tokens is None:
            max_tokens = max(1, min(state.default_max_tokens, room))
        gen = _submit(state, ids, max_tokens, body, request, "messages")
        rid, created = proto.new_id("chatcmpl"), proto.now_s()
        if body.stream:
            include_usage = bool(body.stream_options and body.stream_options.include_usage)

            def chunk(text: str, finish: str | None) -> dict[str, Any]:
                delta = {"content": text} if text or finish is None else {}
                return proto.chat_chunk(rid, created, state.model_name, delta, finish)

            first = proto.chat_chunk(
                rid, created, state.model_name, {"role": "assistant", "content": ""}, None
            )
            return _sse(
                gen,
                chunk,
                lambda: proto.usage_chunk(
                    "chat.completion.chunk", rid, created, state.model_name, gen.usage()
                ),
                include_usage,
                first,
            )
        text, finish = await gen.collect()
        return proto.chat_completion(rid, created, state.model_name, text, finish, gen.usage())

    return app


# ---------------------------------------------------------------------- helpers
def _check_model(state: ServerState, model: str) -> None:
    if model != state.model_name:
        raise APIError(
            404,
            f"model {model!r} does not exist; this server serves {state.model_name!r}",
            "model",
            "model_not_found",
        )


def _prompt_ids(state: ServerState, prompt: Any) -> list[int]:
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], str | list):
        prompt = prompt[0]
    if isinstance(prompt, str):
        return state.tokenizer.encode(prompt)
    ids = list(prompt)
    vocab = state.tokenizer.vocab_size
    if not ids:
        raise APIError(400, "prompt: empty", "prompt")
    if any(not 0 <= t < vocab for t in ids):
        raise APIError(400, f"prompt: token ids must be in [0, {vocab})", "prompt")
    return ids


def _submit(
    state: ServerState,
    ids: list[int],
    max_tokens: int,
    body: proto._Sampling,
    request: Request,
    prompt_param: str,
) -> _Generation:
    d = state.driver
    if not d.alive:
        raise APIError(503, "the engine is not running", code="engine_unavailable")
    _check_context(state, len(ids), max_tokens, prompt_param)
    if d.num_queued() >= state.max_queue:
        state.metrics.rejected.inc()
        raise APIError(
            429,
            f"too many requests waiting ({state.max_queue}); retry later",
            code="rate_limit_exceeded",
            headers={"Retry-After": RETRY_AFTER_S},
        )
    if body.stream and state.max_streams is not None and state.streams >= state.max_streams:
        state.metrics.rejected.inc()
        raise APIError(
            429,
            f"too many concurrent streams ({state.max_streams}); retry later",
            code="rate_limit_exceeded",
            headers={"Retry-After": RETRY_AFTER_S},
        )
    stop_ids = set(_stop_token_ids(state, body))
    if not body.ignore_eos:
        stop_ids.add(state.tokenizer.eos_id)
    if body.min_tokens > max_tokens:
        msg = f"min_tokens ({body.min_tokens}) must be <= max_tokens ({max_tokens})"
        raise APIError(400, msg, "min_tokens")
    params = SamplingParams(
        1.0 if body.temperature is None else body.temperature,
        body.top_p or 1.0,
        body.seed,
        body.top_k,
        body.min_tokens,
        tuple(sorted(stop_ids)) if body.min_tokens else (),
    )
    stops = StopStrings(body.stop_list, body.min_tokens, state.new_decoder().step)
    try:
        handle = d.submit(
            ids,
            max_tokens,
            params,
            stop_ids,
            loop=asyncio.get_running_loop(),
            stop_check=stops if stops.stops else None,
        )
    except ValueError as err:
        raise APIError(400, str(err), "max_tokens", "context_length_exceeded") from None
    except RuntimeError as err:  # the engine died since the check above
        raise APIError(503, str(err), code="engine_unavailable") from None
    if body.stream:
        handle.extra["stream"] = True
        state.count_stream(+1)
    return _Generation(state, handle, stops, request)


def _check_context(state: ServerState, n: int, max_tokens: int, prompt_param: str) -> None:
    ctx = state.driver.rt.max_model_len
    if n >= ctx:
        msg = f"the prompt has {n} tokens; this model's context is {ctx} tokens"
        raise APIError(400, msg, prompt_param, "context_length_exceeded")
    if n + max_tokens > ctx:
        msg = (
            f"this model's context is {ctx} tokens; the prompt ({n} tokens) leaves room for "
            f"at most max_tokens = {ctx - n}, not {max_tokens}"
        )
        raise APIError(400, msg, "max_tokens", "context_length_exceeded")


def _stop_token_ids(state: ServerState, body: proto._Sampling) -> list[int]:
    ids = body.stop_token_ids or []
    vocab = state.tokenizer.vocab_size
    if any(not 0 <= t < vocab for t in ids):
        raise APIError(400, f"stop_token_ids: token ids must be in [0, {vocab})", "stop_token_ids")
    return ids


class _Generation:
    """One request's text stream: detokenise, apply stop strings, watch for disconnects."""

    def __init__(
        self, state: ServerState, handle: RequestHandle, stops: StopStrings, request: Request
    ) -> None:
        self.state = state
        self.driver = state.driver
        self.handle = handle
        self.stops = stops
        self.hold = stops.hold
        self.num_tokens = 0
        self._watch = asyncio.ensure_future(_watch_disconnect(request, self.driver, handle))

    def usage(self) -> dict[str, Any]:
        req = self.handle.request
        return proto.usage(req.prompt_len, self.num_tokens, max(req.num_cached_tokens, 0))

    async def deltas(self) -> AsyncIterator[tuple[str, str | None]]:
        """(text delta, finish reason) pairs; the last one has a finish reason."""
        dec = self.state.new_decoder()
        text, sent = "", 0
        events = self.driver.events(self.handle)
        try:
            async for ev in events:
                if ev.token is not None:
                    self.num_tokens += 1
                    text += dec.step(ev.token)
                finish = ev.finish_reason
                if finish is not None:
                    text += dec.flush()
                if finish == "error":
                    raise APIError(500, self.handle.error or "engine error", code="engine_error")
                if finish == "stop" and self.stops.cut >= 0:  # set before this event was sent
                    yield text[sent : self.stops.cut], finish
                    return
                end = len(text) if finish is not None else max(sent, len(text) - self.hold)
                if end > sent or finish is not None:
                    yield text[sent:end], finish
                    sent = end
        finally:
            await events.aclose()  # aborts the request if it is still running
            self._watch.cancel()

    async def collect(self) -> tuple[str, str]:
        parts, finish = [], "length"
        async for delta, fin in self.deltas():
            parts.append(delta)
            if fin is not None:
                finish = fin
        return "".join(parts), finish


async def _watch_disconnect(request: Request, driver: EngineDriver, handle: RequestHandle) -> None:
    """Abort the request when its client goes away (for streams and plain responses alike)."""
    while not handle.finished:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            if not handle.finished:
                driver.abort(handle)
            return


def _sse(
    gen: _Generation,
    chunk: Callable[[str, str | None], dict[str, Any]],
    usage: Callable[[], dict[str, Any]],
    include_usage: bool,
    first: dict[str, Any] | None,
) -> StreamingResponse:
    async def stream() -> AsyncIterator[str]:
        if first is not None:
            yield _event(first)
        try:
            async for delta, finish in gen.deltas():
                yield _event(chunk(delta, finish))
        except APIError as err:
            from tidal.api.errors import error_body

            yield _event(error_body(err.status, err.message, err.param, err.code))
        if include_usage:
            yield _event(usage())
        yield "data: [DONE]\n\n"

    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    return StreamingResponse(stream(), media_type="text/event-stream", headers=headers)


def _event(obj: dict[str, Any]) -> str:
    return f"data: {json.dumps(obj, separators=(',', ':'))}\n\n"
