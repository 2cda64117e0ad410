"""The OpenAI-compatible server against the official ``openai`` client over a real socket."""

from __future__ import annotations

import asyncio
import json

import pytest

openai = pytest.importorskip("openai")
httpx2 = pytest.importorskip("httpx2")

from tests.api.conftest import LiveServer, start_server, stop_server, wait_idle  # noqa: E402
from tests.runtime.helpers import run, tiny_engine  # noqa: E402
from tidal.runtime.tokenizer import ByteTokenizer  # noqa: E402

pytestmark = pytest.mark.engine
TOK = ByteTokenizer(512)
NO_EOS = {"ignore_eos": True}


def _client(live: LiveServer, key: str = "unused") -> openai.OpenAI:
    return openai.OpenAI(base_url=live.base_url, api_key=key, max_retries=0)


def test_models_are_listed(live):
    models = list(_client(live).models.list())
    assert [m.id for m in models] == ["tiny-llama"]


def test_greedy_completion_is_what_the_engine_generates(live):
    prompt = "The tide comes in"
    r = _client(live).completions.create(
        model="tiny-llama", prompt=prompt, max_tokens=12, temperature=0, extra_body=NO_EOS
    )
    expected, _ = run(tiny_engine(), [TOK.encode(prompt)], 12)  # same seed, other block size
    assert r.choices[0].text == TOK.decode(expected[0])
    assert r.choices[0].finish_reason == "length"
    assert r.usage.prompt_tokens == len(TOK.encode(prompt))
    assert r.usage.completion_tokens == 12


def test_streamed_completion_concatenates_to_the_plain_one(live):
    c = _client(live)
    kw = {"model": "tiny-llama", "prompt": "abc", "max_tokens": 20, "temperature": 0}
    plain = c.completions.create(**kw, extra_body=NO_EOS).choices[0].text
    chunks = list(
        c.completions.create(
            **kw, stream=True, stream_options={"include_usage": True}, extra_body=NO_EOS
        )
    )
    text = "".join(ch.choices[0].text for ch in chunks if ch.choices)
    assert text == plain
    finals = [ch.choices[0].finish_reason for ch in chunks if ch.choices]
    assert finals[-1] == "length"
    assert all(f is None for f in finals[:-1])
    assert chunks[-1].usage.completion_tokens == 20


def test_chat_completion_plain_and_streamed(live):
    c = _client(live)
    msgs = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello"}]
    kw = {"model": "tiny-llama", "messages": msgs, "max_tokens": 10, "temperature": 0}
    plain = c.chat.completions.create(**kw, extra_body=NO_EOS)
    assert plain.choices[0].message.role == "assistant"
    assert plain.usage.completion_tokens == 10
    chunks = list(c.chat.completions.create(**kw, stream=True, extra_body=NO_EOS))
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks)
    assert text == plain.choices[0].message.content
    assert chunks[-1].choices[0].finish_reason == "length"


def test_stop_sequence_truncates_and_finishes_with_stop(live):
    c = _client(live)
    kw = {"model": "tiny-llama", "prompt": "zz", "max_tokens": 40, "temperature": 0}
    full = c.completions.create(**kw, extra_body=NO_EOS).choices[0].text
    stop = full[6:8]
    cut = full.find(stop)
    r = c.completions.create(**kw, stop=[stop], extra_body=NO_EOS)
    assert r.choices[0].text == full[:cut]
    assert r.choices[0].finish_reason == "stop"
    streamed = list(c.completions.create(**kw, stop=stop, stream=True, extra_body=NO_EOS))
    assert "".join(ch.choices[0].text for ch in streamed) == full[:cut]
    assert streamed[-1].choices[0].finish_reason == "stop"
    wait_idle(live.driver)  # the stopped request was aborted and freed its blocks


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [
        (b"{not json", 400, None),
        (json.dumps({"model": "tiny-llama"}).encode(), 400, "prompt"),
        (
            json.dumps({"model": "tiny-llama", "prompt": "x", "max_tokens": "lots"}).encode(),
            400,
            "max_tokens",
        ),
        (
            json.dumps({"model": "tiny-llama", "prompt": "x", "max_tokens": 0}).encode(),
            400,
            "max_tokens",
        ),
        (
            json.dumps({"model": "tiny-llama", "prompt": "x", "temperature": 5}).encode(),
            400,
            "temperature",
        ),
        (json.dumps({"model": "tiny-llama", "prompt": "x", "n": 0}).encode(), 400, "n"),
        (json.dumps({"model": "tiny-llama", "prompt": "x", "n": 65}).encode(), 400, "n"),
        (json.dumps({"model": "tiny-llama", "prompt": [True, False]}).encode(), 400, "prompt"),
        (json.dumps({"model": "tiny-llama", "prompt": [[1, 2.5]]}).encode(), 400, "prompt"),
        (json.dumps({"model": "tiny-llama", "prompt": [1, 2, 99999]}).encode(), 400, "prompt"),
        (
            json.dumps({"model": "tiny-llama", "prompt": "x", "max_tokens": 10**6}).encode(),
            400,
            "max_tokens",
        ),
        (json.dumps({"model": "gpt-4", "prompt": "x"}).encode(), 404, "model"),
        (json.dumps([1, 2, 3]).encode(), 400, None),
    ],
)
def test_malformed_bodies_get_openai_style_errors(live, body, status, param):
    r = httpx2.post(
        live.base_url + "/completions", content=body, headers={"content-type": "application/json"}
    )
    assert r.status_code == status
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["message"]
    if param is not None:
        assert err["param"] == param


def test_chat_body_errors_and_wrong_method(live):
    bad = httpx2.post(
        live.base_url + "/chat/completions", json={"model": "tiny-llama", "messages": []}
    )
    assert bad.status_code == 400
    assert bad.json()["error"]["param"] == "messages"
    role = httpx2.post(
        live.base_url + "/chat/completions",
        json={"model": "tiny-llama", "messages": [{"role": "wizard", "content": "x"}]},
    )
    assert role.status_code == 400
    get = httpx2.get(live.base_url + "/completions")
    assert get.status_code == 405
    assert get.json()["error"]["type"] == "invalid_request_error"
    # the official client maps these to its typed errors
    with pytest.raises(openai.BadRequestError):
        _client(live).completions.create(model="tiny-llama", prompt="x", max_tokens=10**6)
    with pytest.raises(openai.NotFoundError):
        _client(live).completions.create(model="nope", prompt="x")


def test_api_key_is_required_when_set():
    live, thread = start_server(api_key="sesame")
    try:
        with pytest.raises(openai.AuthenticationError):
            list(_client(live, "wrong").models.list())
        assert [m.id for m in _client(live, "sesame").models.list()] == ["tiny-llama"]
        assert httpx2.get(live.url + "/health").status_code == 200  # open routes stay open
    finally:
        stop_server(live, thread)


def test_a_full_queue_answers_429_and_drains():
    # one running request at a time, two may wait: of six concurrent long requests the
    # first runs, two queue, and three are refused while the first is still generating
    live, thread = start_server(max_queue=2, max_seqs=1, token_budget=64)
    try:

        async def main():
            c = openai.AsyncOpenAI(base_url=live.base_url, api_key="x", max_retries=0)

            async def one(i):
                await asyncio.sleep(0.02 * i)
                try:
                    r = await c.completions.create(
                        model="tiny-llama",
                        prompt="q",
                        max_tokens=200,
                        temperature=0,
                        extra_body=NO_EOS,
                    )
                    return r.usage.completion_tokens
                except openai.RateLimitError as err:
                    retry = int(err.response.headers.get("retry-after", 0))
                    ok = err.body["code"] == "rate_limit_exceeded" and retry >= 1
                    return 429 if ok else -1

            return await asyncio.gather(*(one(i) for i in range(6)))

        results = asyncio.run(main())
        assert results.count(429) == 3
        assert sorted(r for r in results if r != 429) == [200, 200, 200]
        wait_idle(live.driver)
        metrics = httpx2.get(live.url + "/metrics").text
        assert "tidal:request_rejected_total 3.0" in metrics
    finally:
        stop_server(live, thread)


def test_client_disconnect_aborts_the_request_and_frees_its_kv(live):
    body = {
        "model": "tiny-llama",
        "prompt": "long",
        "max_tokens": 3000,
        "temperature": 0,
        "stream": True,
        "ignore_eos": True,
    }
    before = live.driver.num_steps
    with httpx2.stream("POST", live.base_url + "/completions", json=body) as r:
        lines = r.iter_lines()
        got = [next(lines) for _ in range(6)]
        assert any(line.startswith("data: ") for line in got)
    wait_idle(live.driver)
    assert live.driver.num_steps - before < 2500  # it stopped long before 3000 tokens
    metrics = httpx2.get(live.url + "/metrics").text
    assert 'tidal:request_success_total{finished_reason="abort"}' in metrics


def test_health_and_metrics(live):
    assert httpx2.get(live.url + "/health").json() == {"status": "ok"}
    _client(live).completions.create(model="tiny-llama", prompt="m", max_tokens=3, temperature=0)
    wait_idle(live.driver)
    text = httpx2.get(live.url + "/metrics").text
    for name in (
        "tidal:num_requests_running 0.0",
        "tidal:num_requests_waiting 0.0",
        "tidal:kv_cache_usage_perc 0.0",
        "tidal:time_to_first_token_seconds_count",
        "tidal:time_per_output_token_seconds_count",
        "tidal:e2e_request_latency_seconds_count",
        "tidal:generation_tokens_total",
    ):
        assert name in text


def test_a_repeated_prompt_reports_cached_tokens_and_prefix_cache_metrics(live):
    c = _client(live)
    prompt = "a shared system prompt that is long enough to fill several KV blocks. " * 3
    kw = {"model": "tiny-llama", "prompt": prompt, "max_tokens": 4, "temperature": 0}
    first = c.completions.create(**kw, extra_body=NO_EOS)
    again = c.completions.create(**kw, extra_body=NO_EOS)
    assert first.choices[0].text == again.choices[0].text
    n = len(TOK.encode(prompt))
    cached = again.usage.prompt_tokens_details.cached_tokens
    assert 0 < cached < n  # full blocks only, never the last prompt token
    metrics = httpx2.get(live.url + "/metrics").text
    hits = [ln for ln in metrics.splitlines() if ln.startswith("tidal:prefix_cache_hits_total")]
    assert hits
    assert float(hits[0].split()[-1]) >= cached
    assert "tidal:prefix_cache_queries_total" in metrics
