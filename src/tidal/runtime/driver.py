"""The real engine's driver: engine steps back to back, as fast as the hardware allows.

One thread owns the engine (scheduler, KV, model); everything else talks to it through a
command inbox that is drained at step boundaries, so a step never sees a half-applied change
and the block accounting never races with the tensors. Times are wall-clock nanoseconds from
the engine's :class:`~tidal.core.clock.WallClock`.

The driver decides nothing about a request's progress: the scheduler's ``update`` applies the
length limit and every stop rule (the request's :class:`~tidal.core.request.StopRule`: stop
token ids and the API's stop strings) and ends the requests, so the batching policies hear every
finish. The driver drains its inbox, steps the engine and turns the step's sampled tokens, and
the endings they caused, into :class:`TokenEvent` s.

Two ways to run it:

* **serving** (:meth:`EngineDriver.start`): a background thread; :meth:`submit` and
  :meth:`abort` are thread-safe, and tokens reach asyncio consumers through one
  ``call_soon_threadsafe`` per step and event loop (:meth:`generate` is the async iterator);
* **replay** (:meth:`EngineDriver.replay`): the caller's thread runs a fixed workload open-loop,
  each request entering the scheduler at its arrival time, as the simulator does — used by
  ``tidal fidelity`` and ``tidal calibrate``.

Supervision: a fault confined to requests (a bad sampling parameter, a failed step) ends those
requests with ``finish_reason="error"`` and the engine goes on; a fault that leaves the
scheduler inconsistent ends the engine thread, fails everything it held, sets ``failure`` and
calls ``on_fatal`` (``alive`` turns False, ``/health`` answers 503, ``tidal serve`` exits 1).

External calls of augmented requests are real awaits (:meth:`EngineDriver.call_external`).
The per-request objects (:class:`TokenEvent`, :class:`RequestHandle`) are in
:mod:`tidal.runtime.handles`.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterable, Sequence

from tidal.core.request import Request, RequestState, StopRule
from tidal.runtime.config import RuntimeEngine
from tidal.runtime.handles import GuardedCheck, RequestHandle, TokenEvent, deliver
from tidal.runtime.replay import StepRecord, replay
from tidal.runtime.sampling import GREEDY, SamplingParams

__all__ = ["EngineDriver", "RequestHandle", "StepRecord", "TokenEvent"]

log = logging.getLogger(__name__)

MAX_CONSECUTIVE_STEP_FAILURES = 3
"""Steps in a row that may fail (each failing its batch) before the engine is declared dead."""


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
        """Why the engine thread ended (None while it runs)."""
        self.on_fatal: list[Callable[[BaseException], None]] = []
        """Called once in the driver thread when the engine thread ends on a failure."""
        self.num_step_failures = 0
        self.num_request_failures = 0
        self._consecutive_failures = 0

    # ------------------------------------------------------------------ thread-safe API
    def submit(
        self,
        prompt_ids: Sequence[int],
        max_tokens: int,
        params: SamplingParams = GREEDY,
        stop_token_ids: Iterable[int] = (),
        loop: asyncio.AbstractEventLoop | None = None,
        callback: Callable[[TokenEvent], None] | None = None,
        stop_check: Callable[[int], bool] | None = None,
    ) -> RequestHandle:
        """Queue a request; its events go to ``handle.queue`` (with ``loop``) or ``callback``.
        Raises ValueError for a request that cannot run, RuntimeError once the engine died."""
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
        stops = frozenset(stop_token_ids)
        req = Request(
            rid, self.clock.now_ns(), len(prompt_ids), max_tokens, token_ids=list(prompt_ids)
        )
        queue: asyncio.Queue[TokenEvent] | None = asyncio.Queue() if loop is not None else None
        handle = RequestHandle(req, params, stops, loop, queue, callback, stop_check)
        if stops or stop_check is not None:
            check = None if stop_check is None else GuardedCheck(handle, stop_check)
            req.stop = StopRule(stops, check)
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

        The request leaves the engine at the next step boundary — its KV is discarded, as in vLLM's
        handling of augmented requests (docs/research/augserve.md's "vLLM baseline") — then
        ``call()`` is awaited on the event loop while other requests keep running; its returned
        tokens are appended (``num_extra_tokens``) and the request re-enters the waiting queue at
        the tail to be prefilled, prompt and output so far included.
        ``handle.extra["external_calls"]`` records ``(position, number of tokens)`` of each call's
        result.

        Hook for the interception policies of issue 4 (Preserve / Swap / value scheduling,
        :class:`tidal.augment.component.Augmentation`): there the scheduler pauses
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
        """Open-loop replay in the caller's thread: :func:`tidal.runtime.replay.replay`."""
        if self._thread is not None:
            raise RuntimeError("replay needs the driver's thread to be stopped")
        replay(self, requests, on_finish, sampling, steps, clock)

    # ------------------------------------------------------------------ engine thread
    def _post(self, cmd: str, handle: RequestHandle, arg: object = None) -> None:
        with self._cv:
            if cmd == "add" and self.failure is not None:
                raise RuntimeError(f"the engine is not running ({self.failure!r})")
            self._inbox.append((cmd, handle, arg))
            self._cv.notify()

    def _serve(self) -> None:
        """The engine loop. A fault confined to requests fails those requests and the loop goes
        on; a fault that breaks the scheduler's invariants, or ``MAX_CONSECUTIVE_STEP_FAILURES``
        failed steps in a row, ends the engine (:meth:`_die`)."""
        sched = self.scheduler
        out: list[tuple[RequestHandle, TokenEvent]] = []
        try:
            while True:
                out = []
                with self._cv:
                    while not self._stop and not self._inbox and not sched.has_work():
                        self._cv.wait(timeout=1.0)
                    if self._stop:
                        break
                    cmds = list(self._inbox)
                    self._inbox.clear()
                t0 = time.perf_counter_ns()
                self._apply(cmds, out)
                if not sched.has_work():
                    deliver(out)
                    continue
                t1 = time.perf_counter_ns()
                self._step(out)
                t2 = time.perf_counter_ns()
                deliver(out)
                self.loop_ns += (t1 - t0) + (time.perf_counter_ns() - t2)
        except BaseException as err:
            self._die(err, out)

    def _step(self, out: list) -> None:
        try:
            plan = self.engine.step()
        except Exception as err:
            self._step_failed(err, out)
            return
        self._consecutive_failures = 0
        if plan is None:
            self._refuse_head(out)
        else:
            self.num_steps += 1
            self._collect(out)

    def _step_failed(self, err: Exception, out: list) -> None:
        """A step raised: fail the batch it ran (the running requests, whose KV it may have
        written half-way), free their blocks, and check that the scheduler is still whole."""
        log.error("engine step failed: %r", err, exc_info=err)
        self.num_step_failures += 1
        self._consecutive_failures += 1
        sched, now = self.scheduler, self.clock.now_ns()
        for req in list(sched.running.values()):
            sched.kv.forget_content(req)  # prefix caching: no stale block
            sched.abort(req, now)
            h = self.handles.get(req.request_id)
            if h is not None:
                h.error = f"engine step failed: {err!r}"
                self._end(h, "error", out)
        sched.check()  # an AssertionError here ends the engine
        if self._consecutive_failures >= MAX_CONSECUTIVE_STEP_FAILURES:
            n = self._consecutive_failures
            raise RuntimeError(f"{n} engine steps failed in a row") from err

    def _die(self, err: BaseException, out: list) -> None:
        """The engine cannot go on: fail every request it holds or has queued, then tell
        ``on_fatal`` (``tidal serve`` exits non-zero so that a supervisor restarts it)."""
        log.critical("the engine thread stopped: %r", err, exc_info=err)
        self.failure = err
        with self._cv:
            pending = [h for c, h, _ in self._inbox if c == "add"]
            self._inbox.clear()
        for h in [*self.handles.values(), *pending]:
            if not h.finished:
                h.error = f"engine failure: {err!r}"
                with contextlib.suppress(Exception):
                    self._end(h, "error", out)
        deliver(out)
        for cb in self.on_fatal:
            with contextlib.suppress(Exception):
                cb(err)

    def _fail(self, h: RequestHandle, err: Exception, out: list, where: str) -> None:
        """One request's command raised: end that request with an error, keep the others."""
        log.warning("request %d failed in %s: %r", h.request.request_id, where, err)
        self.num_request_failures += 1
        if h.finished:
            return
        req = h.request
        if req.request_id in self.handles:
            self.scheduler.abort(req, self.clock.now_ns())
        h.error = f"{where}: {err!r}"
        self._end(h, "error", out)

    def _apply(self, cmds: list[tuple[str, RequestHandle, object]], out: list) -> None:
        now = self.clock.now_ns()
        failed = False
        for cmd, h, arg in cmds:
            try:
                self._apply_one(cmd, h, arg, now, out)
            except Exception as err:
                failed = True
                self._fail(h, err, out, cmd)
        if failed:
            self.scheduler.check()  # an AssertionError here ends the engine

    def _apply_one(self, cmd: str, h: RequestHandle, arg: object, now: int, out: list) -> None:
        sched = self.scheduler
        req = h.request
        if cmd == "add":
            if h.finished:  # aborted before it arrived
                return
            if not h.params.is_default_greedy:
                self.runner.set_sampling(req, h.params)
            self.handles[req.request_id] = h
            sched.add_request(req)
        elif cmd == "abort":
            if h.finished:
                return
            if req.request_id in self.handles:
                sched.abort(req, now)
            self._end(h, "abort", out)
        elif cmd == "pause":
            if h.finished or req.request_id not in self.handles:
                return
            sched.detach(req, now)  # frees the KV; the request leaves the engine
        elif cmd == "resume":
            if h.finished or req.state != RequestState.PAUSED:
                return
            tokens = list(arg)  # type: ignore[call-overload]
            assert req.token_ids is not None
            calls = h.extra.setdefault("external_calls", [])
            calls.append((len(req.token_ids), len(tokens)))  # type: ignore[attr-defined]
            sched.reattach(req, tokens)

    def _collect(self, out: list) -> None:
        """Events of the step just run, from its output: each sampled token, the last one of a
        request carrying how the scheduler ended it (``length``, or ``stop``: the scheduler
        checks the stop rule first, as vLLM's output processor has it). A request that sampled
        several tokens (speculative decoding) ends with the last of them."""
        sampled = self.engine.output.sampled
        last = {req.request_id: i for i, (req, _) in enumerate(sampled)}
        for i, (req, tok) in enumerate(sampled):
            h = self.handles.get(req.request_id)
            if h is None:
                continue
            reason = req.finish_reason if last[req.request_id] == i else None
            if reason is None:
                out.append((h, TokenEvent(tok)))
            elif h.stop_error is not None:  # the stop check raised: the request ended on it
                log.warning("request %d failed in its stop check: %s", req.request_id, h.stop_error)
                self.num_request_failures += 1
                h.error = h.stop_error
                self._end(h, "error", out)
            else:
                self._end(h, reason, out, tok)

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
        self.handles.pop(req.request_id, None)
        self.runner.release(req)
        out.append((h, TokenEvent(token, reason)))
        for cb in self.done_callbacks:
            try:
                cb(h)
            except Exception:  # an observer's bug must not fail the engine
                log.exception("a done callback failed")
