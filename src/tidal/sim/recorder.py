"""Per-request results as columns, written when a request finishes (DESIGN.md §4)."""

from __future__ import annotations

import numpy as np

from tidal.core.request import Request
from tidal.workload.base import RequestSet


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
