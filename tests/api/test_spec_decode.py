"""``tidal serve --speculative-config`` (n-gram prompt lookup): the same completions as without
it (stop strings and stop ids included), vLLM's ``spec_decode`` counters on ``/metrics`` equal
to the engine's own counts, a failed verification step that the engine survives, and named
errors for configurations the real engine cannot run."""

from __future__ import annotations

import pytest

pytest.importorskip("httpx2")

from tests.api.conftest import in_process, metric, wait_idle
from tests.api.test_serve_cli import _serve_captured

pytestmark = pytest.mark.engine
NGRAM3 = '{"method": "ngram", "num_speculative_tokens": 3}'
SPEC = {
    "method": "ngram",
    "num_speculative_tokens": 4,
    "prompt_lookup_min": 1,
    "prompt_lookup_max": 3,
}
M = '{model_name="tiny-llama"}'


def _bodies() -> list[dict]:
    rep = "the tide, the tide, the tide comes in; the tide"
    base = {"model": "tiny-llama", "temperature": 0, "ignore_eos": True}
    return [
        {**base, "prompt": rep, "max_tokens": 40},
        {**base, "prompt": "abcabcabcabcabc", "max_tokens": 33},
        {**base, "prompt": "hello world, hello world, hello", "max_tokens": 40, "stop": ["w"]},
        {**base, "prompt": rep, "max_tokens": 40, "stop_token_ids": [68]},
    ]


def _complete(client, bodies) -> list[tuple[str, str, int]]:
    out = []
    for body in bodies:
        r = client.post("/v1/completions", json=body)
        assert r.status_code == 200, r.text
        j = r.json()
        out.append((j["choices"][0]["text"], j["choices"][0]["finish_reason"],
                    j["usage"]["completion_tokens"]))  # fmt: skip
    return out


def test_completions_are_unchanged_and_metrics_count_what_the_engine_counted():
    bodies = _bodies()
    with in_process() as (client, _):
        ref = _complete(client, bodies)
    with in_process(speculative_config=SPEC) as (client, driver):
        got = _complete(client, bodies)
        wait_idle(driver)
        text = client.get("/metrics").text
        stats = driver.runner.spec_stats
    assert got == ref
    assert {reason for _, reason, _ in ref} == {"length", "stop"}  # both endings exercised
    assert stats.num_accepted_tokens > 0
    for name, want in (
        ("num_drafts", stats.num_drafts),
        ("num_draft_tokens", stats.num_draft_tokens),
        ("num_accepted_tokens", stats.num_accepted_tokens),
    ):
        assert metric(text, f"vllm:spec_decode_{name}_total{M}") == want
        assert metric(text, f"tidal:spec_decode_{name}_total") == want
    per_pos = [
        metric(text, f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{model_name="tiny-llama",position="{i}"}}')  # noqa: E501
        for i in range(4)
    ]
    assert per_pos == stats.accepted_per_pos
    assert sum(per_pos) == stats.num_accepted_tokens


def test_no_spec_counters_without_speculation():
    with in_process() as (client, _):
        assert "spec_decode" not in client.get("/metrics").text


def test_a_failed_verification_step_fails_its_batch_and_the_engine_goes_on(monkeypatch):
    """The step's lookahead blocks were charged when it failed: they must come back."""
    with in_process(speculative_config=SPEC) as (client, driver):
        executor = driver.engine.executor
        real = executor.execute
        failed = []

        def execute(plan, *rest):
            if plan.spec_tokens and not failed:
                failed.append(plan)
                raise RuntimeError("injected fault in a verification step")
            return real(plan, *rest)

        monkeypatch.setattr(executor, "execute", execute)
        r = client.post("/v1/completions", json=_bodies()[1])
        assert r.status_code == 500
        assert failed
        assert driver.num_step_failures == 1
        wait_idle(driver)
        driver.scheduler.check()
        assert _complete(client, _bodies()[1:2])[0][2] == 33  # the next request is served
        wait_idle(driver)
        kv = driver.scheduler.kv
        assert kv.num_free_blocks == kv.num_blocks
        assert driver.alive


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (("--speculative-config", "{not json"), "--speculative-config"),
        (("--speculative-config", '["ngram"]'), "--speculative-config"),
        (("--speculative-config", '{"method": "ngram"}'), "num_speculative_tokens"),
        (
            ("--speculative-config", '{"method": "eagle3", "num_speculative_tokens": 3}'),
            "--speculative-config.method",
        ),
        (("--speculative-config", '{"method": "medusa", "num_speculative_tokens": 3}'), "method"),
        (
            ("--speculative-config", NGRAM3, "--batching", "eb"),
            "batching",
        ),
    ],
)
def test_a_bad_speculative_config_is_a_named_error(monkeypatch, args, field):
    r, seen = _serve_captured(monkeypatch, *args)
    assert r.exit_code != 0
    assert field in r.output
    assert "Traceback" not in r.output
    assert not seen  # refused before serving


def test_serve_speculates_with_the_flag(monkeypatch):
    from tidal.runtime.spec_decode import SpeculativeScheduler

    r, seen = _serve_captured(
        monkeypatch, "--num-kv-blocks", "64", "--speculative-config",
        '{"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": 4}',
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    driver = seen["driver"]
    assert isinstance(driver.scheduler, SpeculativeScheduler)
    spec = driver.rt.config.speculative_config
    assert (spec.num_speculative_tokens, spec.prompt_lookup_min, spec.prompt_lookup_max) == (
        2, 4, 4,
    )  # fmt: skip
