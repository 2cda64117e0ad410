"""vLLM's surfaces on the API: optional ``model``, ``/version``, ``/tokenize``, ``/detokenize``,
``n``, lists of prompts, ``echo``, ``logprobs`` (both shapes), usage in streams, ``vllm:*``
metrics; and the requests that used to end in a 500 or a wrong reading (issue 32 §4): a chat
template's ``raise_exception``, lone surrogates, booleans as token ids."""

from __future__ import annotations

import json
import math

import pytest

pytest.importorskip("httpx2")

from tests.api.conftest import in_process, metric, wait_idle
from tests.runtime.helpers import run, tiny_engine
from tidal.runtime.hf_tokenizer import HFTokenizer
from tidal.runtime.tokenizer import ByteTokenizer, write_hf_tokenizer

pytestmark = pytest.mark.engine
TOK = ByteTokenizer(512)
BASE = {"prompt": "tidal", "max_tokens": 8, "ignore_eos": True}


@pytest.fixture(scope="module")
def app():
    with in_process(num_kv_blocks=256) as pair:
        yield pair


def _post(client, path: str, body: dict):
    """``body`` as ASCII JSON (a lone surrogate as its ``\\ud800`` escape, which JSON allows)."""
    raw = json.dumps(body)
    return client.post(path, content=raw, headers={"content-type": "application/json"})


def _events(text: str) -> list[dict]:
    lines = [ln[6:] for ln in text.splitlines() if ln.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    return [json.loads(x) for x in lines[:-1]]


def test_model_is_optional_and_version_is_served(app):
    client, _ = app
    r = client.post("/v1/completions", json=BASE)
    assert r.status_code == 200, r.text
    assert r.json()["model"] == "tiny-llama"
    r = client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "x"}]})
    assert r.status_code == 200
    assert client.post("/v1/completions", json={**BASE, "model": "x"}).status_code == 404
    import tidal

    assert client.get("/version").json() == {"version": tidal.__version__}


def test_tokenize_and_detokenize_are_the_servers_encoding(app):
    client, driver = app
    r = client.post("/tokenize", json={"prompt": "héllo"}).json()
    assert r["tokens"] == TOK.encode("héllo")
    assert (r["count"], r["max_model_len"]) == (len(r["tokens"]), driver.rt.max_model_len)
    r = client.post("/tokenize", json={"prompt": "hi", "add_special_tokens": False}).json()
    assert r["tokens"] == [104, 105]
    chat = [{"role": "user", "content": "hi"}]
    r = client.post("/tokenize", json={"messages": chat}).json()
    assert r["tokens"] == TOK.encode_chat(chat)
    assert client.post("/detokenize", json={"tokens": r["tokens"]}).json() == {
        "prompt": TOK.decode(r["tokens"])
    }
    for bad, param in [
        ({"prompt": "x", "messages": chat}, "prompt"),
        ({}, "prompt"),
        ({"prompt": "\ud800"}, "prompt"),
    ]:
        r = _post(client, "/tokenize", bad)
        assert (r.status_code, r.json()["error"]["param"]) == (400, param), r.text
    for tokens in ([True], [10**6], []):
        r = client.post("/detokenize", json={"tokens": tokens})
        assert r.status_code == 400, tokens
        assert r.json()["error"]["param"].startswith("tokens"), tokens


def test_n_samples_and_a_list_of_prompts_number_their_choices(app):
    client, _ = app
    greedy = client.post("/v1/completions", json={**BASE, "temperature": 0}).json()
    g_text = greedy["choices"][0]["text"]
    r = client.post(
        "/v1/completions",
        json={**BASE, "prompt": ["tidal", "wave"], "n": 3, "temperature": 1.0, "seed": 7},
    ).json()
    assert [c["index"] for c in r["choices"]] == list(range(6))
    texts = [c["text"] for c in r["choices"]]
    assert len(set(texts[:3])) > 1  # the samples of one prompt differ (seed + j)
    again = client.post(
        "/v1/completions",
        json={**BASE, "prompt": ["tidal", "wave"], "n": 3, "temperature": 1.0, "seed": 7},
    ).json()
    assert [c["text"] for c in again["choices"]] == texts  # and are reproducible
    u = r["usage"]
    assert u["completion_tokens"] == 6 * BASE["max_tokens"]
    assert u["prompt_tokens"] == len(TOK.encode("tidal")) + len(TOK.encode("wave"))
    r = client.post("/v1/completions", json={**BASE, "n": 2, "temperature": 0}).json()
    assert [c["text"] for c in r["choices"]] == [g_text, g_text]


def test_echo_prefixes_the_prompt(app):
    client, _ = app
    plain = client.post("/v1/completions", json={**BASE, "temperature": 0}).json()
    r = client.post("/v1/completions", json={**BASE, "temperature": 0, "echo": True}).json()
    assert r["choices"][0]["text"] == "tidal" + plain["choices"][0]["text"]
    ids = TOK.encode("ab")
    r = client.post(
        "/v1/completions", json={**BASE, "prompt": ids, "temperature": 0, "echo": True}
    ).json()
    assert r["choices"][0]["text"].startswith("ab")
    s = client.post(
        "/v1/completions", json={**BASE, "temperature": 0, "echo": True, "stream": True}
    )
    chunks = _events(s.text)
    assert "".join(c["choices"][0]["text"] for c in chunks) == r_text(client)
    bad = client.post("/v1/completions", json={**BASE, "echo": True, "logprobs": 1})
    assert (bad.status_code, bad.json()["error"]["param"]) == (400, "echo")


def r_text(client) -> str:
    r = client.post("/v1/completions", json={**BASE, "temperature": 0, "echo": True}).json()
    return r["choices"][0]["text"]


def test_completion_logprobs_are_the_models_log_softmax(app):
    """Greedy: every sampled token is its step's most likely, its logprob the top one; the
    values are the runner's own (log-softmax of the logits of the same engine)."""
    client, _ = app
    r = client.post("/v1/completions", json={**BASE, "temperature": 0, "logprobs": 3}).json()
    lp = r["choices"][0]["logprobs"]
    n = BASE["max_tokens"]
    assert len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["text_offset"]) == n
    ids = run(tiny_engine(), [TOK.encode("tidal")], n)[0][0]
    assert lp["tokens"] == [TOK.token_text(t)[0] for t in ids]
    assert "".join(lp["tokens"]) == r["choices"][0]["text"]
    assert lp["text_offset"] == [sum(len(t) for t in lp["tokens"][:i]) for i in range(n)]
    for tok, v, top in zip(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"], strict=True):
        assert v <= 0
        assert math.isfinite(v)
        assert len(top) == 3
        assert top[tok] == v
        assert v == max(top.values())
    assert sum(math.exp(v) for v in lp["top_logprobs"][0].values()) <= 1 + 1e-6


def test_chat_logprobs_plain_and_streamed(app):
    client, _ = app
    body = {
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 6,
        "temperature": 0,
        "logprobs": True,
        "top_logprobs": 2,
        "ignore_eos": True,
    }
    r = client.post("/v1/chat/completions", json=body).json()
    content = r["choices"][0]["logprobs"]["content"]
    assert len(content) == 6
    assert "".join(c["token"] for c in content) == r["choices"][0]["message"]["content"]
    for c in content:
        assert bytes(c["bytes"]).decode() == c["token"]
        assert next(t["logprob"] for t in c["top_logprobs"]) == c["logprob"]
        assert len(c["top_logprobs"]) == 2
    s = client.post(
        "/v1/chat/completions",
        json={**body, "stream": True, "stream_options": {"include_usage": True}},
    )
    events = _events(s.text)
    streamed = [x for e in events for ch in e["choices"] for x in (ch["logprobs"] or {}).get(
        "content", []
    )]  # fmt: skip
    assert streamed == content
    assert events[-1]["usage"]["completion_tokens"] == 6
    bad = client.post("/v1/chat/completions", json={**body, "logprobs": False})
    assert (bad.status_code, bad.json()["error"]["param"]) == (400, "top_logprobs")
    for k in (21, -1):
        bad = client.post("/v1/chat/completions", json={**body, "top_logprobs": k})
        assert bad.status_code == 400


def test_streamed_n_interleaves_choices_and_counts_usage(app):
    client, driver = app
    body = {**BASE, "n": 2, "prompt": ["a", "b"], "stream": True, "temperature": 0}
    body["stream_options"] = {"include_usage": True}
    events = _events(client.post("/v1/completions", json=body).text)
    texts: dict[int, str] = {}
    finishes = {}
    for e in events[:-1]:
        (ch,) = e["choices"]
        texts[ch["index"]] = texts.get(ch["index"], "") + ch["text"]
        if ch["finish_reason"]:
            finishes[ch["index"]] = ch["finish_reason"]
    assert finishes == dict.fromkeys(range(4), "length")
    plain = client.post("/v1/completions", json={**body, "stream": False}).json()
    assert texts == {c["index"]: c["text"] for c in plain["choices"]}
    assert events[-1]["choices"] == []
    assert events[-1]["usage"] == plain["usage"]
    wait_idle(driver)


def test_vllm_metric_names_carry_the_same_values(app):
    client, driver = app
    client.post("/v1/completions", json=BASE)
    wait_idle(driver)
    text = client.get("/metrics").text
    m = 'model_name="tiny-llama"'
    for own, vllm in [
        ("generation_tokens_total", f"generation_tokens_total{{{m}}}"),
        ("prompt_tokens_total", f"prompt_tokens_total{{{m}}}"),
        (
            'request_success_total{finished_reason="length"}',
            f'request_success_total{{finished_reason="length",{m}}}',
        ),
        ("time_to_first_token_seconds_count", f"time_to_first_token_seconds_count{{{m}}}"),
        ("e2e_request_latency_seconds_sum", f"e2e_request_latency_seconds_sum{{{m}}}"),
        ("num_requests_running", f"num_requests_running{{{m}}}"),
        ("kv_cache_usage_perc", f"kv_cache_usage_perc{{{m}}}"),
        ("prefix_cache_queries_total", f"prefix_cache_queries_total{{{m}}}"),
    ]:
        assert f"vllm:{vllm} " in text, vllm
        assert metric(text, f"vllm:{vllm}") == metric(text, f"tidal:{own}"), own
    assert metric(text, "tidal:generation_tokens_total") > 0


# ------------------------------------------------------------------ issue 32 §4
@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/v1/completions", {**BASE, "prompt": "a\ud800b"}, "prompt"),
        ("/v1/completions", {**BASE, "prompt": ["ok", "\udfff"]}, "prompt"),
        ("/v1/completions", {**BASE, "stop": ["\ud800"]}, "stop"),
        (
            "/v1/chat/completions",
            {"messages": [{"role": "user", "content": "\ud800"}]},
            "messages.0.content",
        ),
        (
            "/v1/chat/completions",
            {"messages": [{"role": "user", "content": [{"type": "text", "text": "\udc00"}]}]},
            "messages.0.content",
        ),
        ("/v1/completions", {**BASE, "prompt": [True, False]}, "prompt"),
        ("/v1/completions", {**BASE, "prompt": [[1, True]]}, "prompt"),
        ("/v1/completions", {**BASE, "stop_token_ids": [True]}, "stop_token_ids"),
    ],
)
def test_bad_text_and_boolean_ids_are_400_naming_the_field(app, path, body, param):
    """Before: a lone surrogate reached the tokenizer (500 on both); [true, false] was read as
    token ids 1 and 0."""
    client, _ = app
    r = _post(client, path, body)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"].split(".")[0] == param.split(".")[0]
    assert err["param"].startswith(param)
    assert "surrogate" in err["message"] or "integer" in err["message"] or "int" in err["message"]


def _raising_template_dir(tmp_path):
    d = write_hf_tokenizer(tmp_path / "tok")
    conf = json.loads((d / "tokenizer_config.json").read_text())
    conf["chat_template"] = (  # Llama-2-chat's rule
        "{% for m in messages %}{% if (m['role'] == 'user') != (loop.index0 % 2 == 0) %}"
        "{{ raise_exception('Conversation roles must alternate user/assistant/user/"
        "assistant/...') }}{% endif %}{{ m['content'] }}{% endfor %}"
    )
    (d / "tokenizer_config.json").write_text(json.dumps(conf))
    return d


def test_a_chat_template_that_refuses_the_messages_is_a_400(tmp_path):
    """Before: jinja2's TemplateError escaped the route (500)."""
    tok = HFTokenizer(_raising_template_dir(tmp_path), 512)
    with in_process(app_kw={"tokenizer": tok}, num_kv_blocks=64) as (client, _):
        two_users = [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]
        r = client.post("/v1/chat/completions", json={"messages": two_users, "max_tokens": 2})
        assert r.status_code == 400, r.text
        err = r.json()["error"]
        assert err["param"] == "messages"
        assert "roles must alternate" in err["message"]
        r = client.post("/tokenize", json={"messages": two_users})
        assert r.status_code == 400
        ok = [{"role": "user", "content": "a"}]
        r = client.post("/v1/chat/completions", json={"messages": ok, "max_tokens": 2})
        assert r.status_code == 200
        r = _post(client, "/v1/completions", {**BASE, "prompt": "\ud800"})
        assert r.status_code == 400  # the Hugging Face tokenizer is protected alike


def test_continuous_usage_stats_puts_the_usage_so_far_in_every_chunk(app):
    """vLLM's stream option (guidellm sends it); before: ignored."""
    client, _ = app
    body = {**BASE, "stream": True, "temperature": 0}
    body["stream_options"] = {"include_usage": True, "continuous_usage_stats": True}
    events = _events(client.post("/v1/completions", json=body).text)
    counts = [e["usage"]["completion_tokens"] for e in events]
    assert counts == sorted(counts)
    assert counts[-1] == BASE["max_tokens"]
    assert all("usage" in e for e in events)
