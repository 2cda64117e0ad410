"""The real engine's driver: engine steps back to back, as fast as the hardware allows.

One thread owns the engine (scheduler, KV, model); everything else talks to it through a
command inbox that is drained at step boundaries, so a step never sees a half-applied change
and the block accounting never races with the tensors. Times are wall-clock nanoseconds from
the engine's :class:`~tidal.core.clock.WallClock`.

Two ways to run it:

* **serving** (:meth:`EngineDriver.start`): a background thread; :meth:`submit` and
  :meth:`abort` are thread-safe, and tokens reach asyncio consumers through one
  ``call_soon_threadsafe`` per step and event loop (:meth:`generate` is the async iterator);
* **replay** (:meth:`EngineDriver.replay`): the caller's thread runs a fixed workload open-loop,
  each request entering the scheduler at its arrival time, as the simulator does — used by
  ``tidal fidelity`` and ``tidal calibrate``.

External calls of augmented requests are real awaits: :meth:`EngineDriver.call_external`
awaits the call on the event loop while the request is out of the running set, then appends the
returned tokens (prefilled like a prompt) and puts the request back (see its docstring).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading
import time
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from tidal.core.clock import ThreadCPUClock, WallClock, make_clock
from tidal.core.request import Request, RequestState
from tidal.hardware.perf import StepShape
from tidal.runtime.config import RuntimeEngine
from tidal.runtime.sampling import GREEDY, SamplingParams

_SPIN_NS = 300_000
"""Sleep until this close to an arrival, then spin: ``time.sleep`` overshoots by ~0.1 ms."""


class StepRecord(NamedTuple):
    """One replayed step: start, period (ns, the simulator's step duration), batch shape, and
    the idle time before it (ns)."""

    start_ns: int
    period_ns: int
    shape: StepShape
    idle_ns: int = 0


@dataclass(slots=True)
class TokenEvent:
    token: int | None
    """The sampled token, or None for a terminal event that carries no token (abort)."""
    finish_reason: str | None = None
    """``length`` (max tokens), ``stop`` (stop token), ``abort``, ``error``; None while running."""


@dataclass(eq=False)
class RequestHandle:
    request: Request
    params: SamplingParams = GREEDY
    stop_token_ids: frozenset[int] = frozenset()
    loop: asyncio.AbstractEventLoop | None = None
    queue: asyncio.Queue[TokenEvent] | None = None
    callback: Callable[[TokenEvent], None] | None = None
    """Called in the driver thread for every event (when no event loop is attached)."""
    finish_reason: str | None = None
    error: str | None = None
    extra: dict[str, object] = field(default_factory=dict)

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None


class EngineDriver:
    def __init__(self, rt: RuntimeEngine) -> None:
        self.rt = rt
        self.engine = rt.engine
        self.scheduler = rt.engine.scheduler
        self.runner = rt.runner
        self.clock = rt.engine.clock
        self.handles: dict[int, RequestHandle] = {}
        """Requests in the engine (driver thread only)."""
        self.done_callbacks: list[Callable[[RequestHandle], None]] = []
        """Called in the driver thread when a request ends, however it ends."""
        self._ids = itertools.count()
        self._inbox: deque[tuple[str, RequestHandle, object]] = deque()
        self._cv = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stop = False
        self.num_steps = 0
        self.loop_ns = 0
        """Driver time per step outside ``Engine.step`` (inbox, token delivery), summed."""
        self.failure: BaseException | None = None

    # ------------------------------------------------------------------ thread-safe API
    def submit(
        self,
        prompt_ids: Sequence[int],
        max_tokens: int,
        params: SamplingParams = GREEDY,
        stop_token_ids: Iterable[int] = (),
        loop: asyncio.AbstractEventLoop | None = None,
        callback: Callable[[TokenEvent], None] | None = None,
    ) -> RequestHandle:
        """Queue a request; its events go to ``handle.queue`` (with ``loop``) or ``callback``."""
        if max_tokens < 1:
            raise ValueError("max_tokens must be >= 1")
        if not prompt_ids:
            raise ValueError("the prompt has no tokens")
        if len(prompt_ids) + max_tokens > self.rt.max_model_len:
            raise ValueError(
                f"prompt ({len(prompt_ids)} tokens) + max_tokens ({max_tokens}) exceeds the "
                f"model's context of {self.rt.max_model_len} tokens"
            )
        rid = next(self._ids)
        req = Request(
            rid, self.clock.now_ns(), len(prompt_ids), max_tokens, token_ids=list(prompt_ids)
        )
        handle = RequestHandle(
            req,
            params,
            frozenset(stop_token_ids),
            loop,
            asyncio.Queue() if loop is not None else None,
            callback,
        )
        self._post("add", handle)
        return handle

    def abort(self, handle: RequestHandle) -> None:
        """Drop the request wherever it is and free its KV (idempotent)."""
        self._post("abort", handle)

    def num_queued(self) -> int:
        """Requests not yet running: in the inbox or the scheduler's waiting queue."""
        with self._cv:
            inbox = sum(1 for c, _, _ in self._inbox if c == "add")
        return inbox + self.scheduler.num_waiting

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stop = False
        self._thread = threading.Thread(target=self._serve, name="tidal-engine", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        with self._cv:
            self._stop = True
            self._cv.notify()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive() and self.failure is None

    async def generate(
        self,
        prompt_ids: Sequence[int],
        max_tokens: int,
        params: SamplingParams = GREEDY,
        stop_token_ids: Iterable[int] = (),
    ) -> AsyncIterator[TokenEvent]:
        """Stream a request's events; leaving the iteration early aborts the request."""
        handle = self.submit(
            prompt_ids, max_tokens, params, stop_token_ids, loop=asyncio.get_running_loop()
        )
        async for ev in self.events(handle):
            yield ev

    async def events(self, handle: RequestHandle) -> AsyncGenerator[TokenEvent, None]:
        assert handle.queue is not None, "submit with loop= to consume events asynchronously"
        try:
            while True:
                ev = await handle.queue.get()
                yield ev
                if ev.finish_reason is not None:
                    return
        finally:
            if not handle.finished:
                self.abort(handle)

    async def call_external(
        self, handle: RequestHandle, call: Callable[[], Awaitable[Sequence[int]]]
    ) -> None:
        """Run an external call (tool, retrieval…) of an augmented request as a real await.

        The request leaves the engine at the next step boundary — its KV is discarded, as in
        vLLM's handling of augmented requests (augserve.md's "vLLM baseline") — then ``call()``
        is awaited on the event loop while other requests keep running; its returned tokens are
        appended (``num_extra_tokens``) and the request re-enters the waiting queue at the tail
        to be prefilled, prompt and output so far included. ``handle.extra["external_calls"]``
        records ``(position, number of tokens)`` of each call's result.

        Hook for the interception policies of issue 4 (Preserve / Swap / value scheduling,
        :class:`tidal.engine.augment.component.Augmentation`): there the scheduler pauses
        a request itself at a call point and reports ``on_pause(req, return_time)``; a runtime
        driving it would start this await from ``on_pause`` instead of the "pause" command, and
        map the "resume" command onto ``scheduler.resume(req, now)`` after appending the
        returned token ids to ``token_ids`` (the scheduler counts ``num_extra_tokens`` itself).
        The runtime builds ``BATCHING`` schedulers today, hence the discard fallback here.
        """
        self._post("pause", handle)
        tokens = list(await call())
        self._post("resume", handle, tokens)

    # ------------------------------------------------------------------ replay (caller's thread)
    def replay(
        self,
        requests: Sequence[Request],
        on_finish: Callable[[Request], None] | None = None,
        sampling: SamplingParams = GREEDY,
        steps: list[StepRecord] | None = None,
        clock: str = "wall",
    ) -> None:
        """Run ``requests`` open-loop: each joins the scheduler once the wall clock (restarted
        now) reaches its ``arrival_ns``; returns when all have finished. ``token_ids`` must be
        set (prompts); outputs run to ``max_output_len`` (EOS ignored, as the simulator does).

        ``steps`` receives a :class:`StepRecord` per step. Its period is what the simulator
        calls the step's duration: from this step's start to the next one's when they run back
        to back, else to the end of this step's loop iteration; ``idle_ns`` is how long the
        engine had been idle when the step started (0 when back to back).

        ``clock``: ``wall``, or ``cpu`` to time the replay by this thread's CPU time with idle
        gaps skipped (:class:`~tidal.core.clock.ThreadCPUClock`: a dedicated core's wall time,
        for measurements on a shared machine)."""
        if self._thread is not None:
            raise RuntimeError("replay needs the driver's thread to be stopped")
        sched, engine = self.scheduler, self.engine
        clk = make_clock(clock)
        engine.clock = self.clock = clk
        prev = sched.on_finish
        sched.on_finish = on_finish
        order = sorted(requests, key=lambda r: r.arrival_ns)
        for r in order:
            if not sampling.greedy:
                self.runner.set_sampling(r, sampling)
        i, n = 0, len(order)
        last: tuple[int, StepShape, int] | None = None  # the previous step, while back to back
        idle_since = -1  # when the engine ran out of work (-1: it has work)
        try:
            while i < n or sched.has_work():
                now = clk.now_ns()
                while i < n and order[i].arrival_ns <= now:
                    sched.add_request(order[i])
                    i += 1
                if not sched.has_work():
                    if last is not None and steps is not None:
                        steps.append(StepRecord(last[0], now - last[0], last[1], last[2]))
                    last = None
                    if idle_since < 0:
                        idle_since = now
                    if isinstance(clk, ThreadCPUClock):
                        clk.advance_to(order[i].arrival_ns)
                    else:
                        _sleep_until(clk, order[i].arrival_ns)
                    continue
                start = clk.now_ns()
                idle = start - idle_since if idle_since >= 0 else 0
                plan = engine.step()
                self.num_steps += 1
                if plan is None:
                    if not sched.running:
                        head = sched.waiting.peek()
                        raise RuntimeError(
                            f"request {head.request_id} ({head.num_tokens} tokens) cannot be "
                            f"admitted into an empty engine of {sched.kv.num_blocks} KV blocks"
                        )
                    continue
                idle_since = -1
                if steps is not None:
                    if last is not None:
                        steps.append(StepRecord(last[0], start - last[0], last[1], last[2]))
                    last = (start, plan.shape(), idle)
            if last is not None and steps is not None:
                steps.append(StepRecord(last[0], clk.now_ns() - last[0], last[1], last[2]))
        finally:
            sched.on_finish = prev
            for r in order:
                self.runner.release(r)

    # ------------------------------------------------------------------ engine thread
    def _post(self, cmd: str, handle: RequestHandle, arg: object = None) -> None:
        with self._cv:
            self._inbox.append((cmd, handle, arg))
            self._cv.notify()

    def _serve(self) -> None:
        sched = self.scheduler
        try:
            while True:
                with self._cv:
                    while not self._stop and not self._inbox and not sched.has_work():
                        self._cv.wait(timeout=1.0)
                    if self._stop:
                        break
                    cmds = list(self._inbox)
                    self._inbox.clear()
                t0 = time.perf_counter_ns()
                out = self._apply(cmds)
                if not sched.has_work():
                    self._deliver(out)
                    continue
                t1 = time.perf_counter_ns()
                plan = self.engine.step()
                t2 = time.perf_counter_ns()
                if plan is None:
                    self._refuse_head(out)
                else:
                    self.num_steps += 1
                    self._collect(out)
                self._deliver(out)
                self.loop_ns += (t1 - t0) + (time.perf_counter_ns() - t2)
        except BaseException as err:  # the engine is dead: fail every request loudly
            self.failure = err
            out = []
            for h in list(self.handles.values()):
                h.error = f"engine failure: {err!r}"
                self._end(h, "error", out)
            self._deliver(out)
            raise

    def _apply(self, cmds: list[tuple[str, RequestHandle, object]]) -> list:
        out: list[tuple[RequestHandle, TokenEvent]] = []
        sched = self.scheduler
        now = self.clock.now_ns()
        for cmd, h, arg in cmds:
            req = h.request
            if cmd == "add":
                if h.finished:  # aborted before it arrived
                    continue
                self.handles[req.request_id] = h
                if not h.params.greedy:
                    self.runner.set_sampling(req, h.params)
                sched.add_request(req)
            elif cmd == "abort":
                if h.finished:
                    continue
                if req.request_id in self.handles:
                    sched.abort(req, now)
                self._end(h, "abort", out)
            elif cmd == "pause":
                if h.finished or req.request_id not in self.handles:
                    continue
                sched.abort(req, now)  # frees the KV; the request leaves the engine
                req.num_computed_tokens = 0
                req.state = RequestState.PAUSED
            elif cmd == "resume":
                if h.finished or req.state != RequestState.PAUSED:
                    continue
                tokens = list(arg)  # type: ignore[call-overload]
                assert req.token_ids is not None
                calls = h.extra.setdefault("external_calls", [])
                calls.append((len(req.token_ids), len(tokens)))  # type: ignore[attr-defined]
                req.token_ids.extend(tokens)
                req.num_extra_tokens += len(tokens)
                req.finish_ns = -1
                sched.add_request(req)
        return out

    def _collect(self, out: list) -> None:
        """Events of the step just run: sampled tokens, finishes, stop tokens."""
        result = self.engine.last_result
        sched = self.scheduler
        now = self.clock.now_ns()
        for req, tok in getattr(result, "sampled", ()):
            h = self.handles.get(req.request_id)
            if h is None:
                continue
            if req.state == RequestState.FINISHED:
                self._end(h, "length", out, tok)
            elif tok in h.stop_token_ids:
                sched.abort(req, now)
                req.state = RequestState.FINISHED
                self._end(h, "stop", out, tok)
            else:
                out.append((h, TokenEvent(tok)))

    def _refuse_head(self, out: list) -> None:
        """Work exists but nothing could be scheduled: with nothing running, the queue head
        does not fit the whole KV cache (submit's length check makes this rare)."""
        sched = self.scheduler
        if sched.running or not sched.num_waiting:
            return
        head = sched.waiting.peek()
        sched.abort(head, self.clock.now_ns())
        h = self.handles.get(head.request_id)
        if h is not None:
            h.error = "the request does not fit in the KV cache"
            self._end(h, "error", out)

    def _end(self, h: RequestHandle, reason: str, out: list, token: int | None = None) -> None:
        h.finish_reason = reason
        req = h.request
        if req.finish_ns < 0:
            req.finish_ns = self.clock.now_ns()
        self.handles.pop(req.request_id, None)
        self.runner.release(req)
        out.append((h, TokenEvent(token, reason)))
        for cb in self.done_callbacks:
            cb(h)

    def _deliver(self, out: list[tuple[RequestHandle, TokenEvent]]) -> None:
        by_loop: dict[asyncio.AbstractEventLoop, list] = {}
        for h, ev in out:
            if h.loop is not None:
                by_loop.setdefault(h.loop, []).append((h, ev))
            elif h.callback is not None:
                h.callback(ev)
        for loop, items in by_loop.items():
            with contextlib.suppress(RuntimeError):  # a closed loop: nobody is listening
                loop.call_soon_threadsafe(_put_all, items)


def _put_all(items: list[tuple[RequestHandle, TokenEvent]]) -> None:
    for h, ev in items:
        assert h.queue is not None
        h.queue.put_nowait(ev)


def _sleep_until(clock: WallClock, t_ns: int) -> None:
    while True:
        left = t_ns - clock.now_ns()
        if left <= 0:
            return
        if left > _SPIN_NS:
            time.sleep((left - _SPIN_NS) / 1e9)
