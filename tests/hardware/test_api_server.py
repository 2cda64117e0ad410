"""The client-side TTFT / E2E family (``tidal.hardware.api_server``, issue 28 item 5)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidal.hardware import api_server
from tidal.hardware.api_server import ApiServerOverhead, client_metrics
from tidal.sim.config import load_config
from tidal.sim.run import run_simulation


def _cols(prompt: list[int], ttft_ns: list[int], e2e_ns: list[int]) -> dict[str, np.ndarray]:
    n = len(prompt)
    arrival = np.arange(n, dtype=np.int64) * 1_000_000
    return {
        "arrival_ns": arrival,
        "first_token_ns": arrival + np.asarray(ttft_ns, dtype=np.int64),
        "finish_ns": arrival + np.asarray(e2e_ns, dtype=np.int64),
        "prompt_len": np.asarray(prompt, dtype=np.int64),
    }


def test_offset_is_the_request_part_plus_the_prompts_tokenization_by_hand() -> None:
    over = ApiServerOverhead(request_s=0.010, prompt_token_s=20e-6, source="test")
    # 10 ms + 1000 tokens × 20 µs = 30 ms; 10 ms + 4000 × 20 µs = 90 ms
    assert over.offset_s(np.array([1000, 4000])) == pytest.approx([0.030, 0.090])
    cols = _cols([1000, 4000], [100_000_000, 300_000_000], [500_000_000, 900_000_000])
    m = client_metrics(over, cols)
    # TTFT 100 + 30 = 130 ms and 300 + 90 = 390 ms: mean 260 ms
    assert m["ttft_client_mean_s"] == pytest.approx(0.260)
    # E2E 500 + 30 = 530 ms and 900 + 90 = 990 ms: mean 760 ms
    assert m["e2e_client_mean_s"] == pytest.approx(0.760)
    assert m["api_server"] == {"request_s": 0.010, "prompt_token_s": 20e-6, "source": "test"}


def test_unfinished_requests_are_left_out_as_in_the_engine_side_family() -> None:
    over = ApiServerOverhead(request_s=0.001, prompt_token_s=0.0, source="test")
    cols = _cols([10, 10, 10], [5_000_000, 7_000_000, 9_000_000], [9_000_000, 9_000_000, 0])
    cols["finish_ns"][2] = -1
    m = client_metrics(over, cols)
    assert m["ttft_client_mean_s"] == pytest.approx((0.005 + 0.007) / 2 + 0.001)
    assert m["e2e_client_p50_s"] == pytest.approx(0.009 + 0.001)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.integers(1, 8192), min_size=1, max_size=30),
    st.floats(0.0, 0.2),
    st.floats(0.0, 1e-4),
)
def test_client_side_is_engine_side_shifted_by_the_mean_offset(prompt, a, b) -> None:
    n = len(prompt)
    rng = np.random.default_rng(n)
    ttft = rng.integers(1, 10**9, n)
    cols = _cols(prompt, list(ttft), list(ttft + rng.integers(0, 10**9, n)))
    over = ApiServerOverhead(a, b, "test")
    m = client_metrics(over, cols)
    engine = (cols["first_token_ns"] - cols["arrival_ns"]) / 1e9
    want = float(np.mean(engine)) + a + b * float(np.mean(prompt))
    assert m["ttft_client_mean_s"] == pytest.approx(want, rel=1e-12, abs=1e-12)
    assert m["ttft_client_p99_s"] >= m["ttft_client_p50_s"]


def _run(perf_model: str) -> dict:
    cfg = load_config({
        "model": "llama-3.1-8b", "gpu": "h100", "perf_model": perf_model,
        "workload": {"num_requests": 24, "concurrency": 4, "prompt_len": 1000,
                     "output_len": 40, "length_dist": "uniform", "length_jitter": 0.2},
    })  # fmt: skip
    return run_simulation(cfg).metrics


def test_engine_runs_report_both_families_and_other_models_only_the_engine_side(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    over = ApiServerOverhead(request_s=0.012, prompt_token_s=5e-6, source="test")
    monkeypatch.setitem(api_server.OVERHEADS, "vllm", over)
    m = _run("engine")
    assert m["api_server"]["source"] == "test"
    # the engine-side family is untouched; the client one is shifted per request
    assert m["ttft_client_mean_s"] > m["ttft_mean_s"] + 0.012
    assert m["e2e_client_mean_s"] - m["e2e_mean_s"] == pytest.approx(
        m["ttft_client_mean_s"] - m["ttft_mean_s"], rel=1e-9
    )
    assert m["tpot_mean_s"] == _run("engine")["tpot_mean_s"]
    other = _run("corrected-roofline")
    assert not any(k.startswith(("ttft_client", "e2e_client", "api_server")) for k in other)


def test_the_shipped_vllm_constants_are_physical_and_name_their_fit() -> None:
    over = api_server.overhead_for("vllm")
    assert over is not None
    assert dataclasses.is_dataclass(over)
    assert 0.0 <= over.request_s < 0.5
    assert 0.0 <= over.prompt_token_s < 1e-3
    assert "h100" in over.source.lower()
    assert api_server.overhead_for("no-such-engine") is None
