"""Limits at the door: body size (while reading), auth before parsing, keyed /metrics and
docs, Retry-After on 429, concurrent streams, prompt and max_tokens against the context."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

httpx2 = pytest.importorskip("httpx2")

from tests.api.conftest import in_process, start_server, stop_server, wait_idle  # noqa: E402
from tidal.api.app import create_app  # noqa: E402
from tidal.runtime.config import RuntimeConfig, build_engine  # noqa: E402
from tidal.runtime.driver import EngineDriver  # noqa: E402

pytestmark = pytest.mark.engine
LIMIT = 4096


@pytest.fixture(scope="module")
def keyed_app():
    """An app whose engine never starts: these requests must not get past the door."""
    driver = EngineDriver(build_engine(RuntimeConfig(num_kv_blocks=16, num_threads=1)))
    return create_app(driver, "tiny-llama", api_key="sesame", max_body_bytes=LIMIT)


def _call(app, path, chunks, headers=()):
    """One ASGI request fed ``chunks``; returns (status, body json, chunks read by the app)."""
    sent, read = [], [0]

    async def receive():
        if read[0] < len(chunks):
            read[0] += 1
            more = read[0] < len(chunks)
            return {"type": "http.request", "body": chunks[read[0] - 1], "more_body": more}
        await asyncio.sleep(3600)  # no disconnect while the app answers

    async def send(message):
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(k.encode(), v.encode()) for k, v in headers],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
    }
    asyncio.run(asyncio.wait_for(app(scope, receive, send), 30))
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], json.loads(body), read[0], dict(start["headers"])


AUTH = ("authorization", "Bearer sesame")


def test_a_declared_oversized_body_is_refused_unread(keyed_app):
    """Before: no limit at all (a 200 MB body took the server's RSS to 2.6 GB)."""
    status, body, read, _ = _call(
        keyed_app, "/v1/completions", [b"x" * 10], [AUTH, ("content-length", str(LIMIT + 1))]
    )
    assert status == 413
    assert body["error"]["code"] == "request_too_large"
    assert "--max-body-bytes" in body["error"]["message"]
    assert read == 0


def test_a_chunked_oversized_body_is_refused_while_reading(keyed_app):
    chunk = b"x" * 1000
    status, _, read, _ = _call(keyed_app, "/v1/completions", [chunk] * 100, [AUTH])
    assert status == 413
    assert read == LIMIT // len(chunk) + 1  # stopped at the first chunk past the limit


def test_the_api_key_is_checked_before_the_body_is_read(keyed_app):
    """Before: the body was parsed (a 400 for bad JSON) before the key was checked."""
    for headers in ([], [("authorization", "Bearer wrong")]):
        status, body, read, hdrs = _call(keyed_app, "/v1/completions", [b"{not json"], headers)
        assert status == 401
        assert body["error"]["code"] == "invalid_api_key"
        assert read == 0
        assert hdrs[b"www-authenticate"] == b"Bearer"
    status, body, read, _ = _call(keyed_app, "/v1/completions", [b"{not json"], [AUTH])
    assert (status, read) == (400, 1)  # with the key: parsed, and a named error


@pytest.mark.parametrize("path", ["/metrics", "/docs", "/openapi.json", "/redoc"])
def test_metrics_and_docs_need_the_key_unless_public(path):
    """Before: /metrics, /docs and /openapi.json answered without the key."""
    with in_process({"api_key": "k"}, num_kv_blocks=16) as (client, _):
        assert client.get(path).status_code == 401
        assert client.get(path, headers={"authorization": "Bearer k"}).status_code == 200
        assert client.get("/health").status_code == 200  # liveness probes carry no key
    with in_process({"api_key": "k", "public_meta": True}, num_kv_blocks=16) as (client, _):
        assert client.get(path).status_code == 200
        assert client.get("/v1/models").status_code == 401


def test_a_429_says_when_to_retry(monkeypatch):
    """Before: 429 without a Retry-After header."""
    with in_process({"max_queue": 3}, num_kv_blocks=16) as (client, driver):
        monkeypatch.setattr(driver, "num_queued", lambda: 3)
        r = client.post("/v1/completions", json={"model": "tiny-llama", "prompt": "x"})
        assert r.status_code == 429
        assert int(r.headers["retry-after"]) >= 1
        assert r.json()["error"]["code"] == "rate_limit_exceeded"


def test_concurrent_streams_beyond_the_limit_get_429_then_drain(monkeypatch):
    live, thread = start_server(app_kw={"max_streams": 2}, num_kv_blocks=256)
    executor = live.driver.engine.executor
    real = executor.execute

    def slow(plan, scheduler, *rest):  # 2000 tokens take >= 10 s: the two streams stay open
        time.sleep(0.005)
        return real(plan, scheduler, *rest)

    monkeypatch.setattr(executor, "execute", slow)
    body = {"model": "tiny-llama", "prompt": "s", "max_tokens": 2000, "stream": True}
    url = live.base_url + "/completions"
    try:
        with httpx2.stream("POST", url, json={**body, "ignore_eos": True}) as a:
            lines_a = a.iter_lines()  # held: a dropped iterator closes the stream
            next(lines_a)
            with httpx2.stream("POST", url, json={**body, "ignore_eos": True}) as b:
                lines_b = b.iter_lines()
                next(lines_b)
                assert live.server.config.app.state.tidal.streams == 2
                c = httpx2.post(url, json=body)
                assert c.status_code == 429
                assert c.headers["retry-after"]
                assert "concurrent streams" in c.json()["error"]["message"]
        # both closed (aborted): the slots come back
        wait_idle(live.driver)
        ok = httpx2.post(url, json={**body, "max_tokens": 3})
        assert ok.status_code == 200
    finally:
        stop_server(live, thread)


def test_prompt_and_max_tokens_against_the_context_name_the_field():
    """Before: a prompt alone beyond the context was blamed on max_tokens."""
    with in_process(num_kv_blocks=8, block_size=16) as (client, driver):
        ctx = driver.rt.max_model_len  # 128 tokens
        long = "x" * ctx
        r = client.post("/v1/completions", json={"model": "tiny-llama", "prompt": long})
        assert (r.status_code, r.json()["error"]["param"]) == (400, "prompt")
        assert r.json()["error"]["code"] == "context_length_exceeded"
        msgs = [{"role": "user", "content": long}]
        r = client.post("/v1/chat/completions", json={"model": "tiny-llama", "messages": msgs})
        assert (r.status_code, r.json()["error"]["param"]) == (400, "messages")
        r = client.post(
            "/v1/completions", json={"model": "tiny-llama", "prompt": "x" * 99, "max_tokens": 29}
        )
        assert (r.status_code, r.json()["error"]["param"]) == (400, "max_tokens")
        assert f"at most max_tokens = {ctx - 100}" in r.json()["error"]["message"]
        fits = {"model": "tiny-llama", "prompt": "x" * 99, "max_tokens": 28, "ignore_eos": True}
        r = client.post("/v1/completions", json=fits)
        assert r.json()["usage"]["total_tokens"] == ctx
