"""The engine requests behind one HTTP request: one per (prompt, sample), submitted together.

:func:`submit_batch` checks what the whole batch needs before submitting any of it — the
engine is alive, each prompt plus ``max_tokens`` fits the context, the queue (``max_queue``)
and the stream limit (``max_streams``) have room for every one of its requests, else 400/429
— then submits prompt × ``n`` requests; sample j of a seeded request uses ``seed + j`` (vLLM:
the n samples differ). One watcher per HTTP request aborts all of them when the client goes
away. :class:`Generation` turns one request's token events into text deltas (incremental
detokenisation, stop strings, the ``echo`` prefix) and logprob entries; :class:`Batch` collects
them all (a plain response) or interleaves them as they come (a stream).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fastapi import Request

from tidal.api import protocol as proto
from tidal.api.errors import APIError
from tidal.api.responses import TokenEntry, usage
from tidal.api.stops import StopStrings
from tidal.runtime.driver import EngineDriver, RequestHandle
from tidal.runtime.sampling import SEED_MAX, SEED_MIN, SamplingParams, TokenLogprobs

if TYPE_CHECKING:
    from tidal.api.app import ServerState

RETRY_AFTER_S = "1"


@dataclass(slots=True)
class Delta:
    """A piece of one choice: text, the finish reason on its last piece, new token entries."""

    index: int
    text: str
    finish: str | None
    entries: list[TokenEntry]


class Generation:
    """One request's text stream: detokenise, apply stop strings, record logprob entries."""

    def __init__(
        self,
        state: ServerState,
        index: int,
        handle: RequestHandle,
        stops: StopStrings,
        sink: list[TokenLogprobs] | None,
        prefix: str,
    ) -> None:
        self.state = state
        self.index = index
        self.handle = handle
        self.stops = stops
        self.sink = sink
        self.prefix = prefix
        """Text sent before the output (``echo``: the prompt)."""
        self.num_tokens = 0

    async def deltas(self) -> AsyncIterator[Delta]:
        """The choice's pieces; the last one has a finish reason."""
        dec = self.state.new_decoder()
        text, sent = "", 0
        entries: list[TokenEntry] = []
        events = self.state.driver.events(self.handle)
        try:
            if self.prefix:
                yield Delta(self.index, self.prefix, None, [])
            async for ev in events:
                if ev.token is not None:
                    if self.sink is not None and self.num_tokens < len(self.sink):
                        lp = self.sink[self.num_tokens]
                        entries.append(TokenEntry(ev.token, lp, len(self.prefix) + len(text)))
                    self.num_tokens += 1
                    text += dec.step(ev.token)
                finish = ev.finish_reason
                if finish is not None:
                    text += dec.flush()
                if finish == "error":
                    raise APIError(500, self.handle.error or "engine error", code="engine_error")
                if finish == "stop" and self.stops.cut >= 0:  # set before this event was sent
                    yield Delta(self.index, text[sent : self.stops.cut], finish, entries)
                    return
                end = len(text) if finish is not None else max(sent, len(text) - self.stops.hold)
                if end > sent or finish is not None or entries:
                    yield Delta(self.index, text[sent:end], finish, entries)
                    sent, entries = end, []
        finally:
            await events.aclose()  # aborts the request if it is still running


class Batch:
    """Every generation of one HTTP request, and the one watcher of its client."""

    def __init__(self, gens: list[Generation], request: Request, driver: EngineDriver) -> None:
        self.gens = gens
        self._watch = asyncio.ensure_future(
            _watch_disconnect(request, driver, [g.handle for g in gens])
        )

    def usage(self) -> dict[str, Any]:
        """Prompt tokens once per prompt (its first sample), output tokens of every sample."""
        prompts = cached = 0
        seen: set[int] = set()
        for g in self.gens:
            key = id(g.handle.extra.get("prompt"))
            if key in seen:
                continue
            seen.add(key)
            req = g.handle.request
            prompts += req.prompt_len
            cached += max(req.num_cached_tokens, 0)
        return usage(prompts, sum(g.num_tokens for g in self.gens), cached)

    async def collect(self) -> list[tuple[str, str, list[TokenEntry]]]:
        """(text, finish reason, token entries) per choice, in index order."""

        async def one(g: Generation) -> tuple[str, str, list[TokenEntry]]:
            parts, finish, entries = [], "length", []
            async for d in g.deltas():
                parts.append(d.text)
                entries.extend(d.entries)
                finish = d.finish or finish
            return "".join(parts), finish, entries

        try:
            return list(await asyncio.gather(*(one(g) for g in self.gens)))
        finally:
            self.close()

    async def stream(self) -> AsyncIterator[Delta]:
        """Every choice's pieces as they come (each choice's in order)."""
        queue: asyncio.Queue[Delta | BaseException | None] = asyncio.Queue()

        async def pump(g: Generation) -> None:
            try:
                async for d in g.deltas():
                    await queue.put(d)
            except APIError as err:
                await queue.put(err)
            finally:
                await queue.put(None)

        tasks = [asyncio.ensure_future(pump(g)) for g in self.gens]
        try:
            remaining = len(tasks)
            while remaining:
                item = await queue.get()
                if item is None:
                    remaining -= 1
                elif isinstance(item, BaseException):
                    raise item
                else:
                    yield item
        finally:
            for t in tasks:
                t.cancel()
            for t in tasks:
                with contextlib.suppress(BaseException):
                    await t
            self.close()

    def close(self) -> None:
        self._watch.cancel()


async def _watch_disconnect(
    request: Request, driver: EngineDriver, handles: Sequence[RequestHandle]
) -> None:
    """Abort the requests when their client goes away (for streams and plain responses)."""
    while not all(h.finished for h in handles):
        message = await request.receive()
        if message["type"] == "http.disconnect":
            for h in handles:
                if not h.finished:
                    driver.abort(h)
            return


def _seed(seed: int | None, j: int) -> int | None:
    """Sample j's seed: ``seed + j`` wrapped into the signed 64-bit range."""
    if seed is None or j == 0:
        return seed
    span = SEED_MAX - SEED_MIN + 1
    return (seed + j - SEED_MIN) % span + SEED_MIN


def _check_room(state: ServerState, k: int, stream: bool) -> None:
    d = state.driver
    if not d.alive:
        raise APIError(503, "the engine is not running", code="engine_unavailable")
    if d.num_queued() + k > state.max_queue:
        state.metrics.rejected.inc()
        raise APIError(
            429,
            f"too many requests waiting ({state.max_queue}); retry later",
            code="rate_limit_exceeded",
            headers={"Retry-After": RETRY_AFTER_S},
        )
    if stream and state.max_streams is not None and state.streams + k > state.max_streams:
        state.metrics.rejected.inc()
        raise APIError(
            429,
            f"too many concurrent streams ({state.max_streams}); retry later",
            code="rate_limit_exceeded",
            headers={"Retry-After": RETRY_AFTER_S},
        )


def check_context(state: ServerState, n: int, max_tokens: int, prompt_param: str) -> None:
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


def _stop_ids(state: ServerState, body: proto._Sampling) -> set[int]:
    ids = body.stop_token_ids or []
    vocab = state.tokenizer.vocab_size
    if any(not 0 <= t < vocab for t in ids):
        raise APIError(400, f"stop_token_ids: token ids must be in [0, {vocab})", "stop_token_ids")
    out = set(ids)
    if not body.ignore_eos and state.tokenizer.eos_id >= 0:  # -1: the model declares none
        out.add(state.tokenizer.eos_id)
    return out


def submit_batch(
    state: ServerState,
    prompts: list[list[int]],
    max_tokens: int,
    body: proto._Sampling,
    request: Request,
    prompt_param: str,
    prefixes: list[str] | None = None,
) -> Batch:
    """Submit ``n`` samples of every prompt (choice index = prompt × n + sample)."""
    for ids in prompts:
        check_context(state, len(ids), max_tokens, prompt_param)
    _check_room(state, len(prompts) * body.n, body.stream)
    stop_ids = _stop_ids(state, body)
    if body.min_tokens > max_tokens:
        msg = f"min_tokens ({body.min_tokens}) must be <= max_tokens ({max_tokens})"
        raise APIError(400, msg, "min_tokens")
    gens: list[Generation] = []
    try:
        for i, ids in enumerate(prompts):
            for j in range(body.n):
                prefix = prefixes[i] if prefixes else ""
                gens.append(_submit_one(state, ids, max_tokens, body, stop_ids, j, prefix))
                gens[-1].index = len(gens) - 1
    except BaseException:
        for g in gens:
            state.driver.abort(g.handle)
        raise
    return Batch(gens, request, state.driver)


def _submit_one(
    state: ServerState,
    ids: list[int],
    max_tokens: int,
    body: proto._Sampling,
    stop_ids: set[int],
    j: int,
    prefix: str,
) -> Generation:
    k = body.num_logprobs
    sink: list[TokenLogprobs] | None = [] if k is not None else None
    params = SamplingParams(
        1.0 if body.temperature is None else body.temperature,
        body.top_p or 1.0,
        _seed(body.seed, j),
        body.top_k,
        body.min_tokens,
        tuple(sorted(stop_ids)) if body.min_tokens else (),
        k,
        sink,
    )
    stops = StopStrings(body.stop_list, body.min_tokens, state.new_decoder().step)
    try:
        handle = state.driver.submit(
            ids,
            max_tokens,
            params,
            stop_ids,
            loop=asyncio.get_running_loop(),
            stop_check=stops if stops.stops else None,
        )
    except ValueError as err:
        raise APIError(400, str(err), "max_tokens", "context_length_exceeded") from None
    except RuntimeError as err:  # the engine died since the check
        raise APIError(503, str(err), code="engine_unavailable") from None
    handle.extra["prompt"] = ids  # the samples of one prompt share it (usage counts it once)
    if body.stream:
        handle.extra["stream"] = True
        state.count_stream(+1)
    return Generation(state, 0, handle, stops, sink, prefix)
