"""A bounded loopback load test: many concurrent streams, none lost, no KV block leaked."""

from __future__ import annotations

import asyncio
import time

import pytest

openai = pytest.importorskip("openai")

from tests.api.conftest import start_server, stop_server, wait_idle  # noqa: E402

pytestmark = pytest.mark.engine

NUM_REQUESTS = 200
MAX_TOKENS = 8


def test_concurrent_streams_lose_no_request_and_leak_no_kv_block():
    # 96 KV blocks of 16 tokens cannot hold 200 requests of ~40 tokens at once: admission
    # waits on the KV cache (and preemption may occur) while every stream stays open.
    live, thread = start_server(num_kv_blocks=96, max_seqs=256, token_budget=512)
    try:

        async def main():
            c = openai.AsyncOpenAI(base_url=live.base_url, api_key="x", max_retries=0)

            async def one(i: int) -> tuple[int, str | None, int]:
                stream = await c.completions.create(
                    model="tiny-llama",
                    prompt=f"request {i}: " + "x" * (i % 23),
                    max_tokens=MAX_TOKENS,
                    temperature=0.7,
                    seed=i,
                    stream=True,
                    stream_options={"include_usage": True},
                    extra_body={"ignore_eos": True},
                )
                finish, used = None, -1
                async for ch in stream:
                    if ch.choices and ch.choices[0].finish_reason:
                        finish = ch.choices[0].finish_reason
                    if ch.usage is not None:
                        used = ch.usage.completion_tokens
                return i, finish, used

            return await asyncio.wait_for(
                asyncio.gather(*(one(i) for i in range(NUM_REQUESTS))), timeout=120
            )

        t0 = time.monotonic()
        results = asyncio.run(main())
        elapsed = time.monotonic() - t0
        assert sorted(i for i, _, _ in results) == list(range(NUM_REQUESTS))
        assert all(f == "length" and u == MAX_TOKENS for _, f, u in results), results
        wait_idle(live.driver)
        kv = live.driver.scheduler.kv
        assert kv.num_free_blocks == kv.num_blocks
        live.driver.scheduler.check()
        assert not live.driver.handles
        assert elapsed < 120
    finally:
        stop_server(live, thread)
