"""The HTTP schema fuzzed in-process: schemathesis over the app's own OpenAPI document, and
hypothesis over JSON request bodies. Every request ends in a 2xx or a named 4xx, never a 5xx,
and afterwards the engine is healthy, idle and has leaked no KV block (bounded: < 60 s)."""

from __future__ import annotations

import json

import pytest

schemathesis = pytest.importorskip("schemathesis")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from starlette.testclient import TestClient  # noqa: E402

from tests.api.conftest import wait_idle  # noqa: E402
from tidal.api.app import create_app  # noqa: E402
from tidal.runtime.config import RuntimeConfig, build_engine  # noqa: E402
from tidal.runtime.driver import EngineDriver  # noqa: E402

pytestmark = pytest.mark.engine
NAMED_4XX = {400, 401, 404, 405, 413, 422, 429}
OUTCOMES: dict[int, int] = {}


# built at import (schemathesis parametrizes from the schema); the engine starts in `served`
_driver = EngineDriver(build_engine(RuntimeConfig(num_kv_blocks=16, block_size=16, num_threads=1)))
# a 256-token context; n samples and lists of prompts multiply a request's work: a short queue
# (429 beyond) and a short default output keep every request within the client's timeout
_app = create_app(
    _driver, "tiny-llama", max_body_bytes=64 << 10, max_queue=8, default_max_tokens=16
)
schema = schemathesis.openapi.from_asgi("/openapi.json", _app)


@pytest.fixture(scope="module", autouse=True)
def served():
    with TestClient(_app, raise_server_exceptions=False) as client:
        yield client, _driver


@schema.parametrize()
@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
def test_schemathesis_finds_no_5xx(case, served):
    response = case.call()
    assert response.status_code < 500, (case.as_curl_command(), response.text[:500])
    if response.status_code >= 400:
        assert response.status_code in NAMED_4XX
        err = response.json()["error"]
        assert err["message"]
        assert set(err) == {"message", "type", "param", "code"}


_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=12,
)
_VALID = {
    "prompt": st.sampled_from(
        ["hi", "", [256, 1, 2], [[7, 8]], ["a"], ["a", "b"], "\ud800x", [True, False], [1.0]]
    ),
    "messages": st.sampled_from(
        [[{"role": "user", "content": "hi"}], [{"role": "user", "content": "a\udfffb"}]]
    ),
    "max_tokens": st.integers(-2, 8),
    "temperature": st.sampled_from([0, 0.7, 2, 2.5, -1]),
    "top_p": st.sampled_from([0.5, 1, 0, 1.5]),
    "top_k": st.integers(-3, 600),
    "min_tokens": st.integers(-1, 10),
    "seed": st.integers(-(2**70), 2**70),
    "stop": st.sampled_from(["a", ["x", "yz"], [], ["a"] * 5, ""]),
    "stop_token_ids": st.lists(st.integers(-2, 600), max_size=3),
    "stream": st.booleans(),
    "stream_options": st.sampled_from([{"include_usage": True}, {}, None]),
    "ignore_eos": st.booleans(),
    "n": st.integers(0, 3),
    "logprobs": st.sampled_from([None, 0, 3, 21, True]),
    "echo": st.booleans(),
    "best_of": st.integers(0, 3),
    "logit_bias": st.sampled_from([{}, {"1": 2}]),
    "tool_choice": st.sampled_from(["none", "auto", "required"]),
    "response_format": st.sampled_from([{"type": "text"}, {"type": "json_object"}]),
}
_field = st.sampled_from(sorted(_VALID))
_bodies = st.builds(
    lambda model, changes: {"model": model, **changes},
    st.sampled_from(["tiny-llama", "tiny-llama", "other"]),
    # up to 3 fields at a time, each an edge value of its own kind or any JSON at all
    st.dictionaries(_field, st.nothing(), max_size=0)
    | _field.flatmap(lambda f: st.fixed_dictionaries({f: _VALID[f] | _json}))
    | st.dictionaries(_field, st.one_of(*_VALID.values()) | _json, max_size=3),
)


@settings(
    max_examples=150, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck)
)
@given(body=_bodies, chat=st.booleans())
def test_any_json_body_gets_a_named_answer(served, body, chat):
    client, _ = served
    path = "/v1/chat/completions" if chat else "/v1/completions"
    body.setdefault("prompt", "fuzz")
    body.setdefault("messages", [{"role": "user", "content": "fuzz"}])
    body.setdefault("max_tokens", 4)
    raw = json.dumps(body, allow_nan=True)  # NaN/Infinity, as Python's json reads them
    r = client.post(path, content=raw, headers={"content-type": "application/json"})
    assert r.status_code < 500, (raw, r.text[:500])
    if r.status_code != 200:
        assert r.status_code in NAMED_4XX
        assert r.json()["error"]["message"]
    OUTCOMES[r.status_code] = OUTCOMES.get(r.status_code, 0) + 1


def test_the_engine_is_healthy_and_idle_after_fuzzing(served):
    """Runs after the fuzzers (file order): nothing crashed, nothing leaked."""
    client, driver = served
    assert client.get("/health").json() == {"status": "ok"}
    wait_idle(driver)
    driver.scheduler.check()
    assert driver.num_step_failures == 0
    assert driver.num_request_failures == 0
    print("fuzz outcomes", OUTCOMES)
    assert OUTCOMES.get(200, 0) >= 10, OUTCOMES  # the fuzzer reached the engine, not only 400s
