"""Per-request results as columns, written when a request finishes (docs/DESIGN.md §4)."""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Protocol

import numpy as np

from tidal.core.request import Request
from tidal.core.spool import ColumnSet, ColumnSpool, array_reader, range_reader
from tidal.workload.base import RequestSet


class Recorder(Protocol):
    """What the simulation loop writes: actual arrival times, the engine each request was
    handed to, and each finished request's times and counts; ``columns()`` reads them back as
    one column per name, indexed by request id."""

    arrival_ns: np.ndarray
    num_finished: int

    def assign(self, request_id: int, engine: int) -> None: ...

    def on_finish(self, req: Request) -> None: ...

    def columns(self) -> MutableMapping[str, np.ndarray]: ...


class RequestRecorder:
    """Columns indexed by request id (the request's position in the workload)."""

    def __init__(self, requests: RequestSet) -> None:
        n = len(requests)
        self.requests = requests
        self.arrival_ns = requests.arrival_ns.copy()
        """Actual arrival times (differ from the workload's under closed-loop clients)."""
        self.first_scheduled_ns = np.full(n, -1, dtype=np.int64)
        self.first_token_ns = np.full(n, -1, dtype=np.int64)
        self.finish_ns = np.full(n, -1, dtype=np.int64)
        self.output_tokens = np.zeros(n, dtype=np.int64)
        self.num_preemptions = np.zeros(n, dtype=np.int64)
        self.cached_tokens = np.zeros(n, dtype=np.int64)
        """Prompt tokens found in the prefix cache at the first admission (vLLM's
        ``num_cached_tokens``)."""
        self.instance = np.full(n, -1, dtype=np.int64)
        self.num_finished = 0

    def on_finish(self, req: Request) -> None:
        i = req.request_id
        self.first_scheduled_ns[i] = req.first_scheduled_ns
        self.first_token_ns[i] = req.first_token_ns
        self.finish_ns[i] = req.finish_ns
        self.output_tokens[i] = req.num_output_tokens
        self.num_preemptions[i] = req.num_preemptions
        self.cached_tokens[i] = max(req.num_cached_tokens, 0)
        self.num_finished += 1

    def assign(self, request_id: int, engine: int) -> None:
        self.instance[request_id] = engine

    def columns(self) -> dict[str, np.ndarray]:
        cols = {
            "request_id": np.arange(len(self.arrival_ns), dtype=np.int64),
            "arrival_ns": self.arrival_ns,
            "prompt_len": self.requests.prompt_len.astype(np.int64),
            "output_len": self.requests.output_len.astype(np.int64),
            "first_scheduled_ns": self.first_scheduled_ns,
            "first_token_ns": self.first_token_ns,
            "finish_ns": self.finish_ns,
            "output_tokens": self.output_tokens,
            "num_preemptions": self.num_preemptions,
            "cached_tokens": self.cached_tokens,
            "instance": self.instance,
        }
        for k, v in self.requests.extra.items():
            cols.setdefault(k, v)
        return cols


SPOOLED = (
    "first_scheduled_ns",
    "first_token_ns",
    "finish_ns",
    "output_tokens",
    "num_preemptions",
    "cached_tokens",
    "instance",
)
"""The columns a request's finish writes (:class:`SpooledRecorder`)."""
_UNSET = (-1, -1, -1, 0, 0, 0, -1)
"""Their values for a request that never finished."""


class SpooledRecorder:
    """The same columns in memory independent of the run's length, for open-loop runs (a
    cluster): finished requests fill blocks of ``block`` consecutive ids; a block is appended
    to a :class:`~tidal.core.spool.ColumnSpool` once every request of it and before it has
    finished, so the spool is in id order and memory holds only the blocks between the oldest
    unfinished request and the newest finished one. Arrival times are the workload's (the
    simulator writes back the same times); ``instance`` holds the engine of requests in flight
    only."""

    def __init__(self, requests: RequestSet, block: int = 4096) -> None:
        self.requests = requests
        self.arrival_ns = requests.arrival_ns
        self.instance: dict[int, int] = {}
        """Request id → engine, for requests in flight only."""
        self.num_finished = 0
        self._n = len(requests)
        self._block = block
        self._open: dict[int, tuple[list[np.ndarray], list[int]]] = {}
        """Block index → its column arrays and [requests left]."""
        self._next = 0
        """First block not yet spooled."""
        self._spool = ColumnSpool(SPOOLED, 16_384)

    def assign(self, request_id: int, engine: int) -> None:
        self.instance[request_id] = engine

    def _new(self, b: int) -> tuple[list[np.ndarray], list[int]]:
        size = min(self._block, self._n - b * self._block)
        cols = [np.full(size, v, dtype=np.int64) for v in _UNSET]
        entry = (cols, [size])
        self._open[b] = entry
        return entry

    def on_finish(self, req: Request) -> None:
        i = req.request_id
        b, j = divmod(i, self._block)
        entry = self._open.get(b)
        if entry is None:
            entry = self._new(b)
        cols, left = entry
        cols[0][j] = req.first_scheduled_ns
        cols[1][j] = req.first_token_ns
        cols[2][j] = req.finish_ns
        cols[3][j] = req.num_output_tokens
        cols[4][j] = req.num_preemptions
        cols[5][j] = max(req.num_cached_tokens, 0)
        cols[6][j] = self.instance.pop(i, -1)
        self.num_finished += 1
        left[0] -= 1
        if left[0] == 0 and b == self._next:
            self._advance(False)

    def _advance(self, final: bool) -> None:
        """Spool complete blocks from ``_next`` on; at the end of a run (``final``) every
        block, with the engines of requests delivered but unfinished."""
        while self._next * self._block < self._n:
            b = self._next
            entry = self._open.get(b)
            if not final and (entry is None or entry[1][0]):
                return
            if entry is None:
                entry = self._new(b)
            if entry[1][0]:
                inst, base = entry[0][6], b * self._block
                for j in range(len(inst)):
                    inst[j] = self.instance.pop(base + j, int(inst[j]))
            self._spool.extend(entry[0])
            del self._open[b]
            self._next += 1

    def columns(self) -> ColumnSet:
        self._advance(True)
        i8 = np.dtype(np.int64)
        readers = {
            "request_id": (range_reader(), i8),
            "arrival_ns": (array_reader(self.arrival_ns), self.arrival_ns.dtype),
            "prompt_len": (array_reader(self.requests.prompt_len, np.int64), i8),
            "output_len": (array_reader(self.requests.output_len, np.int64), i8),
        }
        for k in SPOOLED:
            readers[k] = (self._spool.reader(k), i8)
        for k, v in self.requests.extra.items():
            readers.setdefault(k, (array_reader(v), v.dtype))
        return ColumnSet(self._n, readers)
