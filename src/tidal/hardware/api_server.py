"""What a benchmark client measures beyond the engine core: the API server's request path.

The simulator's latencies are the **engine-side** ones: a request's ``arrival_ns`` is the
instant the engine core can schedule it, its first token is the end of the step that sampled
it (the prefill step samples the first token: no extra step). That is what vLLM's own
``vllm:time_to_first_token_seconds`` measures, up to the frontend's output processing: vLLM
stamps ``arrival_time`` once the OpenAI server has parsed and tokenized the request and hands
it to the engine client, and takes the first-token latency when the frontend's output
processor handles the first output (``IterationStats.update_from_output`` in vLLM's
``vllm/v1/metrics/stats.py``; vLLM's metrics design notes, docs.vllm.ai ``design/metrics``).
A benchmark client (``vllm bench serve``, aiperf) starts its clock before the HTTP request
and stops it at the first streamed chunk, so its TTFT and E2E also hold

* the ingress: HTTP and JSON parsing, the prompt's tokenization in the API server process
  (work in proportion to the prompt: ``prompt_token_s`` per token), input processing and the
  hand-over to the engine-core process (a fixed part);
* the egress of a chunk: the engine core's output back to the frontend, incremental
  detokenization, the server-sent event and the client's parsing (a fixed part).

:class:`ApiServerOverhead` adds ``request_s + prompt_token_s · prompt`` to every completed
request's TTFT and E2E (the fixed part holds one ingress and one egress; TPOT, a difference of
two client timestamps that both carry an egress, is unchanged). The result is the
**client-side** family ``ttft_client_*`` / ``e2e_client_*`` in ``summary.json``, beside the
engine-side ``ttft_*`` / ``e2e_*``, with ``perf_model: engine`` (where the engine is known);
the closed loop itself is not delayed by it (a client re-sends a few ms later than the engine
sees its slot free: a shift of (ingress + egress) / E2E in load, under 1 % for the rows it
was checked on). The constants and how they were obtained: :data:`OVERHEADS`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from tidal.core.metrics import _pcts, gathered


@dataclass(frozen=True)
class ApiServerOverhead:
    """Client-side minus engine-side latency of one request: ``request_s + prompt_token_s·P``
    for a prompt of P tokens (module docstring)."""

    request_s: float
    prompt_token_s: float
    source: str

    def offset_s(self, prompt_tokens: np.ndarray) -> np.ndarray:
        """Seconds a client adds to each request's TTFT and E2E."""
        return self.request_s + self.prompt_token_s * np.asarray(prompt_tokens, dtype=float)

    def describe(self) -> dict[str, Any]:
        return asdict(self)


OVERHEADS: dict[str, ApiServerOverhead] = {
    "vllm": ApiServerOverhead(
        request_s=0.0315,
        prompt_token_s=0.0,
        source="fitted on the 237 H100 vLLM rows of aiconfigurator-core 0.12.0's silicon "
        "sample (bench/client_fit.py, constant only; refit after the all-reduce tables' "
        "element counts were read as bytes, issue 28); H200, B200, B300 held out",
    ),
}
"""Per engine. Fitted on ONE GPU's rows only (``bench/client_fit.py``; numbers in
``docs/design/client_side_latency.md``): the H100 vLLM rows of the silicon sample, by the
median |relative error| of the client-side TTFT; the H200, B200 and B300 rows are the
held-out check. Only the per-request constant is fitted: a free per-token slope takes all the
weight (0 ms + 27 µs per prompt token, ten times a fast tokenizer's cost: it absorbs the
step model's prefill errors of some models, not tokenization) and does worse on the held-out
GPUs; ``prompt_token_s`` stays 0 until a measured tokenization cost replaces it."""


def overhead_for(engine: str) -> ApiServerOverhead | None:
    """The API-server overhead of ``engine`` (None: not modelled for it)."""
    return OVERHEADS.get(engine)


def _client(extra: Callable[[np.ndarray], np.ndarray]) -> tuple[Callable[..., np.ndarray], ...]:
    def ttft(first: np.ndarray, arrival: np.ndarray, finish: np.ndarray,
             prompt: np.ndarray) -> np.ndarray:  # fmt: skip
        done = finish >= 0
        return (first[done] - arrival[done]) / 1e9 + extra(prompt[done])

    def e2e(finish: np.ndarray, arrival: np.ndarray, prompt: np.ndarray) -> np.ndarray:
        done = finish >= 0
        return (finish[done] - arrival[done]) / 1e9 + extra(prompt[done])

    return ttft, e2e


def client_metrics(over: ApiServerOverhead, cols: Mapping[str, np.ndarray]) -> dict[str, Any]:
    """``ttft_client_*`` and ``e2e_client_*`` (mean and percentiles, as the engine-side
    families) of the completed requests, and the overhead used (``api_server``)."""
    finish = np.asarray(cols["finish_ns"])
    n_done = int((finish >= 0).sum())
    ttft, e2e = _client(over.offset_s)
    out: dict[str, Any] = {}
    for name, names, fn in (
        ("ttft_client", ("first_token_ns", "arrival_ns", "finish_ns", "prompt_len"), ttft),
        ("e2e_client", ("finish_ns", "arrival_ns", "prompt_len"), e2e),
    ):
        x = gathered(cols, names, n_done, fn) if n_done else np.empty(0)
        _pcts(name, x, out)
    out["api_server"] = over.describe()
    return out
