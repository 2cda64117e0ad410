"""Parameters: refused by name when not implemented, honoured when implemented (top_k,
min_tokens, stop_token_ids), and stop strings counted as finished requests."""

from __future__ import annotations

import pytest

pytest.importorskip("httpx2")

from tests.api.conftest import in_process, metric, wait_idle
from tests.runtime.helpers import run, tiny_engine
from tidal.runtime.sampling import SamplingParams
from tidal.runtime.tokenizer import ByteTokenizer, IncrementalDecoder

pytestmark = pytest.mark.engine
TOK = ByteTokenizer(512)
BASE = {"model": "tiny-llama", "prompt": "tidal", "max_tokens": 12, "ignore_eos": True}


@pytest.fixture(scope="module")
def app():
    with in_process(num_kv_blocks=256) as pair:
        yield pair


def _post(client, path="/v1/completions", **kw):
    return client.post(path, json={**BASE, **kw})


@pytest.mark.parametrize(
    ("param", "value"),
    [
        ("logit_bias", {"65": 5}),
        ("suffix", "tail"),
        ("best_of", 3),
        ("response_format", {"type": "json_object"}),
        ("tools", [{"type": "function", "function": {"name": "f"}}]),
        ("tool_choice", "required"),
        ("functions", [{"name": "f"}]),
        ("repetition_penalty", 1.2),
        ("min_p", 0.1),
        ("top_logprobs", 2),
        ("guided_json", {"type": "object"}),
    ],
)
def test_an_unimplemented_parameter_is_a_400_naming_it(app, param, value):
    """Before: logit_bias, suffix, best_of, response_format, tools/tool_choice (and the vLLM
    extensions) were silently ignored (200)."""
    client, _ = app
    r = _post(client, **{param: value})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == param
    assert param in err["message"] or "supported" in err["message"]


@pytest.mark.parametrize(
    ("param", "value"),
    [
        ("logit_bias", {}),
        ("suffix", None),
        ("best_of", 1),
        ("response_format", {"type": "text"}),
        ("tools", []),
        ("tool_choice", "none"),
        ("repetition_penalty", 1.0),
        ("min_p", 0),
        ("user", "someone"),  # unknown fields stay ignored
    ],
)
def test_the_default_value_of_an_unimplemented_parameter_is_accepted(app, param, value):
    client, _ = app
    assert _post(client, **{param: value}).status_code == 200


def test_top_k_one_samples_the_greedy_output(app):
    """Before: top_k was ignored, so temperature 1.5 sampled something else."""
    client, _ = app
    greedy = _post(client, temperature=0).json()["choices"][0]["text"]
    for seed in range(3):
        r = _post(client, temperature=1.5, top_k=1, seed=seed)
        assert r.json()["choices"][0]["text"] == greedy
    hot = {_post(client, temperature=1.5, seed=s).json()["choices"][0]["text"] for s in range(3)}
    assert hot != {greedy}  # without top_k the same seeds do sample
    r = _post(client, top_k=-2)
    assert (r.status_code, r.json()["error"]["param"]) == (400, "top_k")


def test_stop_token_ids_and_min_tokens(app):
    """Before: min_tokens was ignored (and stop_token_ids unknown). Expected outputs come from
    the runner itself with the same weights (greedy: block size and batch do not matter)."""
    client, _ = app
    prompt = [256, 65, 66]  # greedy continues with 109 ('m'), 242, 256, 22, ...
    free = run(tiny_engine(), [prompt], 12)[0][0]
    first = free[0]
    r = _post(client, temperature=0, prompt=prompt, stop_token_ids=[first])
    assert r.json()["choices"][0]["finish_reason"] == "stop"
    assert r.json()["usage"]["completion_tokens"] == 1
    masked = SamplingParams(0.0, min_tokens=5, suppress_ids=(first,))
    ref = run(tiny_engine(), [prompt], 12, sampling=lambda _: masked)[0][0]
    assert first not in ref[:5]
    assert ref[:5] != free[:5]
    ends = [i for i, t in enumerate(ref) if t == first and i >= 5]
    n = ends[0] + 1 if ends else 12
    r = _post(client, temperature=0, prompt=prompt, stop_token_ids=[first], min_tokens=5)
    out = r.json()
    assert out["usage"]["completion_tokens"] == n
    assert out["choices"][0]["text"] == TOK.decode(ref[:n])
    r = _post(client, min_tokens=13)
    assert (r.status_code, r.json()["error"]["param"]) == (400, "min_tokens")
    r = _post(client, stop_token_ids=[10**6])
    assert (r.status_code, r.json()["error"]["param"]) == (400, "stop_token_ids")


@pytest.mark.parametrize("stream", [False, True])
def test_a_stop_string_finishes_the_request_as_stop_and_times_it(app, stream):
    """Before: the server aborted a request its stop string ended, so /metrics counted it as
    finished_reason="abort" and left it out of the E2E latency histogram."""
    client, driver = app
    full = _post(client, temperature=0, max_tokens=40).json()["choices"][0]["text"]
    stop = full[10:12]
    cut = full.find(stop)
    wait_idle(driver)
    before = client.get("/metrics").text
    r = _post(client, temperature=0, max_tokens=40, stop=[stop], stream=stream)
    if stream:
        chunks = [line for line in r.text.splitlines() if line.startswith("data: {")]
        assert '"finish_reason":"stop"' in chunks[-1]
    else:
        assert r.json()["choices"][0] == {
            "index": 0,
            "text": full[:cut],
            "logprobs": None,
            "finish_reason": "stop",
        }
    wait_idle(driver)
    after = client.get("/metrics").text
    for name, delta in [
        ('tidal:request_success_total{finished_reason="stop"}', 1),
        ('tidal:request_success_total{finished_reason="abort"}', 0),
        ("tidal:e2e_request_latency_seconds_count", 1),
    ]:
        assert metric(after, name) - metric(before, name) == delta, name
    # the engine stopped at the token that completed the stop string: no token wasted
    ids = run(tiny_engine(), [TOK.encode(BASE["prompt"])], 40)[0][0]
    dec, text = IncrementalDecoder(), ""
    n = 0
    while len(text) < cut + len(stop):
        text += dec.step(ids[n])
        n += 1
    name = "tidal:generation_tokens_total"
    assert metric(after, name) - metric(before, name) == n


def test_min_tokens_defers_a_stop_string(app):
    """A stop string counts only if it ends in the text of the min_tokens-th token or later
    (vLLM): hand-derived from the reference token ids and their text offsets."""
    client, _ = app
    ids = run(tiny_engine(), [TOK.encode(BASE["prompt"])], 40)[0][0]
    dec, ends = IncrementalDecoder(), []
    text = ""
    for t in ids:
        text += dec.step(t)
        ends.append(len(text))  # text length after each token
    stop = text[1]  # a character that recurs in this output
    first_end = next(k for k, e in enumerate(ends) if e > text.find(stop))  # 0-based token
    m = first_end + 3  # min_tokens two tokens past the first match's token
    before_m = ends[m - 2]  # text before the m-th token
    j = text.find(stop, before_m)
    assert j > text.find(stop)  # without min_tokens an earlier match would win
    r = _post(client, temperature=0, max_tokens=40, stop=stop, min_tokens=m)
    out = r.json()["choices"][0]
    assert out["text"] == (text[:j] if j >= 0 else text)
    assert out["finish_reason"] == ("stop" if j >= 0 else "length")
