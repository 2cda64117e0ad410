"""Sending a benchmark's requests on schedule (vLLM ``bench serve`` semantics).

Send times: with ``request_rate = inf`` every request is sent at once; otherwise the gaps are
Gamma draws with shape ``burstiness`` and mean ``1/request_rate`` (``burstiness = 1`` is a
Poisson process; < 1 burstier, > 1 more regular); a trace's own times replace them. At most
``max_concurrency`` requests are in flight (a request whose time has come waits for a slot, as
vLLM's semaphore does). Each request is sent once (no retries), so completed + failed = sent.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from tidal.core.errors import ConfigError
from tidal.measure.client import RequestResult, payload, send
from tidal.measure.dataset import BenchRequest


@dataclass(frozen=True, slots=True)
class BenchSettings:
    base_url: str
    endpoint: str
    model: str
    request_rate: float = math.inf
    burstiness: float = 1.0
    max_concurrency: int | None = None
    seed: int = 0
    ignore_eos: bool = False
    api_key: str | None = None
    request_timeout_s: float = 600.0

    @property
    def chat(self) -> bool:
        return "chat" in self.endpoint


def send_offsets(reqs: list[BenchRequest], rate: float, burstiness: float, seed: int) -> np.ndarray:
    """Send time of each request in seconds from the start (see the module docstring)."""
    if all(r.arrival_s is not None for r in reqs):
        return np.array([r.arrival_s for r in reqs], dtype=np.float64)
    if math.isnan(rate) or rate <= 0:
        raise ConfigError("request-rate", f"must be > 0 or inf, got {rate}")
    if not burstiness > 0:
        raise ConfigError("burstiness", f"must be > 0, got {burstiness}")
    if math.isinf(rate):
        return np.zeros(len(reqs))
    rng = np.random.default_rng(seed)
    gaps = rng.gamma(burstiness, 1.0 / (rate * burstiness), len(reqs))
    gaps[0] = 0.0
    return np.cumsum(gaps)


async def run_requests(
    s: BenchSettings,
    reqs: list[BenchRequest],
    on_done: Callable[[int, RequestResult], None] | None = None,
) -> tuple[list[RequestResult], int]:
    """Every request's result (in input order) and the run's start (perf_counter ns)."""
    import httpx2  # lazy: optional dependency (httpx2)

    if s.max_concurrency is not None and s.max_concurrency < 1:
        raise ConfigError("max-concurrency", f"must be >= 1, got {s.max_concurrency}")
    offsets = send_offsets(reqs, s.request_rate, s.burstiness, s.seed)
    url = s.base_url.rstrip("/") + "/" + s.endpoint.lstrip("/")
    headers = {"Authorization": f"Bearer {s.api_key}"} if s.api_key else {}
    limit = s.max_concurrency or len(reqs)
    sem = asyncio.Semaphore(limit)
    results: list[RequestResult] = [RequestResult() for _ in reqs]
    timeout = httpx2.Timeout(s.request_timeout_s, connect=30.0)
    limits = httpx2.Limits(max_connections=limit, max_keepalive_connections=limit)
    async with httpx2.AsyncClient(timeout=timeout, limits=limits) as client:
        start = time.perf_counter_ns()

        async def one(i: int) -> None:
            delay = start + int(offsets[i] * 1e9) - time.perf_counter_ns()
            if delay > 0:
                await asyncio.sleep(delay / 1e9)
            async with sem:
                body = payload(reqs[i], s.model, s.chat, s.ignore_eos)
                results[i] = await send(client, url, body, headers)
            if on_done is not None:
                on_done(i, results[i])

        await asyncio.gather(*(one(i) for i in range(len(reqs))))
    return results, start


async def served_model(base_url: str, api_key: str | None) -> str:
    """The first model of ``GET /v1/models`` (vLLM's default for ``--model``)."""
    import httpx2  # lazy: optional dependency (httpx2)

    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    url = base_url.rstrip("/") + "/v1/models"
    try:
        async with httpx2.AsyncClient(timeout=30.0) as client:
            resp = await client.get(url, headers=headers)
            resp.raise_for_status()
            return str(resp.json()["data"][0]["id"])
    except Exception as err:
        raise ConfigError(
            "model", f"cannot list the models of {url}: {err}", "give --model NAME"
        ) from None
