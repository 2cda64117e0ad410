"""A bounded soak of the server over loopback (uvicorn on 127.0.0.1, a free port): many
mixed requests at fixed concurrency, then the process RSS has not drifted beyond a bound, the
gauges are back to zero and no KV block is held. The short run is in the default suite; the
long one (``-m slow``) runs 2,000 requests."""

from __future__ import annotations

import asyncio
import time

import pytest

openai = pytest.importorskip("openai")
httpx2 = pytest.importorskip("httpx2")

from tests.api.conftest import metric, start_server, stop_server, wait_idle  # noqa: E402

pytestmark = pytest.mark.engine


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


async def _load(base_url: str, n: int, concurrency: int, offset: int) -> dict[str, int]:
    c = openai.AsyncOpenAI(base_url=base_url, api_key="x", max_retries=0)
    sem = asyncio.Semaphore(concurrency)
    finishes: dict[str, int] = {}

    async def one(i: int) -> None:
        async with sem:
            kind = i % 4
            kw = {"model": "tiny-llama", "max_tokens": 6, "temperature": 0.8, "seed": i}
            if kind == 3:  # a stop string that may end it early
                kw["stop"] = ["a"]
            if kind % 2 == 0:
                stream = await c.completions.create(
                    prompt=f"soak {i + offset}", stream=True, extra_body={"ignore_eos": True}, **kw
                )
                finish = None
                async for ch in stream:
                    if ch.choices and ch.choices[0].finish_reason:
                        finish = ch.choices[0].finish_reason
            else:
                r = await c.chat.completions.create(
                    messages=[{"role": "user", "content": f"soak {i}"}], **kw
                )
                finish = r.choices[0].finish_reason
            finishes[str(finish)] = finishes.get(str(finish), 0) + 1

    try:
        await asyncio.wait_for(asyncio.gather(*(one(i) for i in range(n))), timeout=600)
    finally:
        await c.close()
    return finishes


def _soak(n: int, concurrency: int = 32) -> None:
    live, thread = start_server(num_kv_blocks=256, max_seqs=64, token_budget=512)
    try:
        asyncio.run(_load(live.base_url, 100, concurrency, 0))  # warm up allocators
        wait_idle(live.driver)
        rss0 = _rss_mb()
        t0 = time.monotonic()
        finishes = asyncio.run(_load(live.base_url, n, concurrency, 100))
        elapsed = time.monotonic() - t0
        wait_idle(live.driver)
        drift = _rss_mb() - rss0
        assert sum(finishes.values()) == n
        assert set(finishes) <= {"length", "stop"}, finishes
        text = httpx2.get(live.url + "/metrics").text
        for gauge in ("num_requests_running", "num_requests_waiting", "kv_cache_usage_perc"):
            assert metric(text, f"tidal:{gauge}") == 0, gauge
        assert metric(text, "tidal:engine_step_failures_total") == 0
        ended = sum(
            metric(text, f'tidal:request_success_total{{finished_reason="{r}"}}')
            for r in ("length", "stop")
        )
        assert ended == n + 100
        assert metric(text, "tidal:e2e_request_latency_seconds_count") == n + 100
        kv = live.driver.scheduler.kv
        assert kv.num_free_blocks == kv.num_blocks
        live.driver.scheduler.check()
        assert not live.driver.handles
        # a leak of even 10 kB per request would show as ≥ 5 MB over 500 requests
        assert drift < 5 + 0.01 * n, f"RSS grew {drift:.1f} MB over {n} requests"
        print(f"soak: {n} requests, c={concurrency}, {elapsed:.1f} s, RSS drift {drift:+.1f} MB")
    finally:
        stop_server(live, thread)


def test_short_soak_holds_memory_and_returns_gauges_to_zero():
    _soak(500)


@pytest.mark.slow
def test_long_soak_holds_memory_and_returns_gauges_to_zero():
    _soak(2000)
