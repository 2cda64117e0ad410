"""Every way a request ends on the real engine reaches the batching policy (issue 30).

Before: the driver decided stops itself and ended those requests by aborting them, which emits
no event, so under ``tidal serve --batching eb`` the online output-length estimator learned only
from requests that hit ``max_tokens``. Now the scheduler's ``update`` applies every stop rule;
here EB's estimator must observe each request that ends on EOS, a stop token id or a stop string
(with its true output length), and ``/metrics`` must count it by finish reason."""

from __future__ import annotations

import pytest

pytest.importorskip("httpx2")

from tests.api.conftest import in_process, metric, wait_idle
from tests.runtime.helpers import run, tiny_engine, write_cpu_profile
from tidal.runtime.tokenizer import ByteTokenizer, IncrementalDecoder

pytestmark = pytest.mark.engine
TOK = ByteTokenizer(512)


def _eos_tokenizer(eos: int) -> ByteTokenizer:
    """The byte tokenizer with ``eos`` as its end-of-sequence id (dummy weights never sample
    the real one, 257, on these prompts)."""
    tok = ByteTokenizer(512)
    tok.eos_id = eos  # type: ignore[misc]
    return tok


def _first_repeat_free(ids: list[int], k: int) -> int:
    """A token of ``ids`` first sampled at index ≥ ``k``: ending on it ends early."""
    return next(t for i, t in enumerate(ids) if i >= k and t not in ids[:i])


@pytest.mark.parametrize("batching", ["eb", "ebplus"])
def test_eos_stop_ids_and_stop_strings_reach_on_finished_and_metrics(tmp_path, batching):
    p_eos, p_ids, p_str = (TOK.encode(w) for w in ("hello", "the sea", "tidal"))
    outs = run(tiny_engine(), [p_eos, p_ids, p_str], 40)[0]
    ref = dict(zip(("eos", "ids", "str"), outs, strict=True))
    eos = _first_repeat_free(ref["eos"], 3)
    stop_id = _first_repeat_free(ref["ids"], 1)
    dec, text, ends = IncrementalDecoder(), "", []
    for t in ref["str"]:
        text += dec.step(t)
        ends.append(len(text))
    stop = text[10:12]
    assert len(stop) == 2
    n_str = next(k for k, e in enumerate(ends) if e >= text.find(stop) + len(stop)) + 1
    expect = {  # request -> (finish reason, output tokens)
        "eos": ("stop", ref["eos"].index(eos) + 1),
        "ids": ("stop", ref["ids"].index(stop_id) + 1),
        "str": ("stop", n_str),
        "len": ("length", 6),
    }
    bodies = {
        "eos": {"prompt": p_eos, "max_tokens": 30},
        "ids": {"prompt": p_ids, "max_tokens": 30, "stop_token_ids": [stop_id], "ignore_eos": True},
        "str": {"prompt": p_str, "max_tokens": 40, "stop": [stop], "ignore_eos": True},
        "len": {"prompt": p_ids, "max_tokens": 6, "ignore_eos": True},
    }
    profile = write_cpu_profile(tmp_path / "cpu.json")
    with in_process(
        {"tokenizer": _eos_tokenizer(eos)}, batching=batching, profile=profile, max_seqs=4
    ) as (client, driver):
        policy = driver.scheduler.policy
        ctl = policy.eb.ctl if batching == "ebplus" else policy.ctl
        learned: list[tuple[int, int]] = []
        observe = ctl.observe

        def spy(prompt_len: int, output_len: int, now_ns: int) -> None:
            learned.append((prompt_len, output_len))
            observe(prompt_len, output_len, now_ns)

        ctl.observe = spy
        got = {}
        for name, body in bodies.items():
            body = {"model": "tiny-llama", "temperature": 0, **body}
            r = client.post("/v1/completions", json=body)
            assert r.status_code == 200, r.text
            out = r.json()
            got[name] = (out["choices"][0]["finish_reason"], out["usage"]["completion_tokens"])
        wait_idle(driver)
        text = client.get("/metrics").text
    assert got == expect
    # EB's estimator observed every request, each with the output length it really had
    assert sorted(learned) == sorted((len(bodies[k]["prompt"]), n) for k, (_, n) in expect.items())
    for reason, count in [("stop", 3), ("length", 1), ("abort", 0), ("error", 0)]:
        name = f'tidal:request_success_total{{finished_reason="{reason}"}}'
        assert metric(text, name) == count, name
    assert metric(text, "tidal:e2e_request_latency_seconds_count") == 4
