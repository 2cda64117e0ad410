"""A supervised engine: a fault fails the requests it touched and the engine goes on; a fault
that would leave it inconsistent ends it loudly (/health 503, ``tidal serve`` exits 1)."""

from __future__ import annotations

import threading
import time

import pytest

httpx2 = pytest.importorskip("httpx2")

from tests.api.conftest import _free_port, in_process, metric, wait_idle  # noqa: E402
from tidal.runtime.driver import MAX_CONSECUTIVE_STEP_FAILURES  # noqa: E402
from tidal.runtime.sampling import SEED_MAX, SEED_MIN  # noqa: E402

pytestmark = pytest.mark.engine


def _body(**kw):
    return {"model": "tiny-llama", "prompt": "tide", "max_tokens": 4, "ignore_eos": True, **kw}


def _healthy(client, driver) -> None:
    assert client.get("/health").json() == {"status": "ok"}
    r = client.post("/v1/completions", json=_body(temperature=0))
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["completion_tokens"] == 4
    wait_idle(driver)
    driver.scheduler.check()
    kv = driver.scheduler.kv
    assert kv.num_free_blocks == kv.num_blocks


@pytest.mark.parametrize("seed", [1180591620717411303424, SEED_MAX + 1, SEED_MIN - 1])
def test_an_out_of_range_seed_is_a_400_naming_seed_and_the_engine_lives(seed):
    """Before: 500, the engine thread died on torch's manual_seed overflow, and every later
    request got 503 until a restart."""
    with in_process() as (client, driver):
        r = client.post("/v1/completions", json=_body(temperature=1.0, seed=seed))
        assert r.status_code == 400
        assert r.json()["error"]["param"] == "seed"
        assert "seed" in r.json()["error"]["message"]
        _healthy(client, driver)


def test_the_extreme_int64_seeds_sample_reproducibly():
    with in_process() as (client, _):
        for seed in (SEED_MIN, SEED_MAX):
            a = client.post("/v1/completions", json=_body(temperature=1.0, seed=seed))
            b = client.post("/v1/completions", json=_body(temperature=1.0, seed=seed))
            assert a.status_code == b.status_code == 200
            assert a.json()["choices"][0]["text"] == b.json()["choices"][0]["text"]


def test_a_request_whose_setup_raises_fails_alone(monkeypatch):
    """Before: any exception while the engine thread applied a request's command (here the
    runner's sampling setup) killed the thread."""
    with in_process() as (client, driver):
        real = driver.runner.set_sampling

        def set_sampling(req, params):
            if params.seed == 13:
                raise RuntimeError("injected sampling fault")
            real(req, params)

        monkeypatch.setattr(driver.runner, "set_sampling", set_sampling)
        bad = client.post("/v1/completions", json=_body(temperature=1.0, seed=13))
        assert bad.status_code == 500
        assert bad.json()["error"]["code"] == "engine_error"
        assert "injected sampling fault" in bad.json()["error"]["message"]
        assert driver.num_request_failures == 1
        ok = client.post("/v1/completions", json=_body(temperature=1.0, seed=14))
        assert ok.status_code == 200
        _healthy(client, driver)
        text = client.get("/metrics").text
        assert metric(text, "tidal:engine_request_failures_total") == 1
        assert metric(text, 'tidal:request_success_total{finished_reason="error"}') == 1


def test_a_failed_step_fails_its_batch_and_the_engine_goes_on(monkeypatch):
    """Before: an exception in a step killed the engine thread (503 for every later request)."""
    with in_process() as (client, driver):
        executor = driver.engine.executor
        real = executor.execute
        calls = {"n": 0}

        def execute(plan, *rest):
            calls["n"] += 1
            if calls["n"] == 1:
                raise RuntimeError("injected device fault")
            return real(plan, *rest)

        monkeypatch.setattr(executor, "execute", execute)
        r = client.post("/v1/completions", json=_body(temperature=0))
        assert r.status_code == 500
        assert "injected device fault" in r.json()["error"]["message"]
        assert driver.num_step_failures == 1
        _healthy(client, driver)  # blocks freed, invariants whole, next request served


def test_a_stream_whose_step_fails_ends_with_an_error_event(monkeypatch):
    with in_process() as (client, driver):
        executor = driver.engine.executor
        real = executor.execute
        steps = {"n": 0}

        def execute(plan, *rest):
            steps["n"] += 1
            if steps["n"] == 3:
                raise RuntimeError("injected mid-stream fault")
            return real(plan, *rest)

        monkeypatch.setattr(executor, "execute", execute)
        r = client.post("/v1/completions", json=_body(temperature=0, max_tokens=20, stream=True))
        events = [line for line in r.text.splitlines() if line.startswith("data: ")]
        assert events[-1] == "data: [DONE]"
        assert "injected mid-stream fault" in events[-2]
        _healthy(client, driver)


def test_persistent_step_failures_end_the_engine_and_health_tells_the_truth(monkeypatch):
    with in_process() as (client, driver):
        fatal = []
        driver.on_fatal.append(fatal.append)

        def execute(plan, *rest):
            raise RuntimeError("the device is gone")

        monkeypatch.setattr(driver.engine.executor, "execute", execute)
        for _ in range(MAX_CONSECUTIVE_STEP_FAILURES):
            assert client.post("/v1/completions", json=_body()).status_code == 500
        deadline = time.monotonic() + 10
        # ``alive`` turns false when the failure is recorded, before on_fatal runs: wait for both
        while (driver.alive or not fatal) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not driver.alive
        assert len(fatal) == 1
        health = client.get("/health")
        assert health.status_code == 503
        assert "steps failed in a row" in health.json()["status"]
        assert metric(client.get("/metrics").text, "tidal:engine_alive") == 0
        r = client.post("/v1/completions", json=_body())
        assert r.status_code == 503
        assert r.json()["error"]["code"] == "engine_unavailable"


def test_tidal_serve_exits_nonzero_when_the_engine_dies(monkeypatch):
    """The server exits (status 1) so that a supervisor restarts it, instead of living on
    answering 503 (before: it lived on)."""
    uvicorn = pytest.importorskip("uvicorn")
    from tidal.api.app import create_app
    from tidal.cli.serve import EXIT_ENGINE_DIED, run_supervised
    from tidal.runtime.config import RuntimeConfig, build_engine
    from tidal.runtime.driver import EngineDriver

    driver = EngineDriver(build_engine(RuntimeConfig(num_kv_blocks=64, num_threads=1)))
    monkeypatch.setattr(
        driver.engine.executor, "execute", lambda *a: (_ for _ in ()).throw(OSError("gone"))
    )
    port = _free_port()
    server = uvicorn.Server(
        uvicorn.Config(create_app(driver, "tiny-llama"), "127.0.0.1", port, log_level="critical")
    )
    result = {}
    thread = threading.Thread(
        target=lambda: result.update(code=run_supervised(server, driver)), daemon=True
    )
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    url = f"http://127.0.0.1:{port}/v1/completions"
    for _ in range(MAX_CONSECUTIVE_STEP_FAILURES):
        assert httpx2.post(url, json=_body(), timeout=30).status_code == 500
    thread.join(timeout=30)
    assert not thread.is_alive()
    assert result["code"] == EXIT_ENGINE_DIED


def test_a_failed_step_leaves_no_half_written_block_in_the_prefix_cache(monkeypatch):
    """Prefix caching registers a full block when it is allocated (vLLM's rule), before the step
    writes it. Before: a step that raised left those blocks cached, so the next request with the
    same prompt reused KV that was never computed: a silently wrong output."""
    prompt = "a prompt of several full KV blocks, shared by two requests. " * 2
    ref = _body(prompt=prompt, temperature=0, max_tokens=8)
    with in_process() as (client, _):
        expected = client.post("/v1/completions", json=ref).json()["choices"][0]["text"]
    with in_process() as (client, driver):
        assert driver.scheduler.kv.prefix_caching
        executor = driver.engine.executor
        real = executor.execute
        calls = {"n": 0}

        def execute(plan, *rest):
            calls["n"] += 1
            if calls["n"] == 1:
                raise RuntimeError("injected fault before any KV was written")
            return real(plan, *rest)

        monkeypatch.setattr(executor, "execute", execute)
        assert client.post("/v1/completions", json=ref).status_code == 500
        again = client.post("/v1/completions", json=ref).json()
        assert again["choices"][0]["text"] == expected
        assert again["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
        _healthy(client, driver)
