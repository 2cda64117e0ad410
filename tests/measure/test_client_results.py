"""The result files of vllm bench serve, aiperf and guidellm as measured runs: real outputs of
aiperf 0.13.0 and guidellm 0.8.1 against ``tidal serve`` (``fixtures/README.md``) give the
per-request counts the server's ``/metrics`` recorded, replay as traces, and feed ``tidal
fidelity --measured``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tidal.core.errors import ConfigError
from tidal.workload.client_results import client_format, read_client_results
from tidal.workload.measured import load_measured, measured_columns
from tidal.workload.traces import detect_format, load_trace

FIX = Path(__file__).parent / "fixtures"
GUIDELLM = FIX / "guidellm-0.8.1-benchmarks.json"
AIPERF = FIX / "aiperf-0.13.0-profile_export.jsonl"


def _server_metrics() -> dict[str, float]:
    out = {}
    for line in (FIX / "tidal-serve-metrics.txt").read_text().splitlines():
        name, value = line.rsplit(" ", 1)
        out[name] = float(value)
    return out


def test_formats_are_told_apart():
    assert client_format(GUIDELLM) == "guidellm"
    assert client_format(AIPERF) == "aiperf"
    assert detect_format(GUIDELLM) == detect_format(AIPERF) == "measured"
    mooncake = Path("/nonexistent")
    assert client_format(mooncake) is None


def test_both_clients_count_what_the_server_counted():
    """Round trip: 8 guidellm + 8 aiperf requests; their files' per-request prompt and output
    tokens sum to the server's own counters (tidal:* and vllm:* alike)."""
    cols = [read_client_results(p) for p in (GUIDELLM, AIPERF)]
    for c in cols:
        assert len(c["success"]) == 8
        assert c["success"].all()
        assert (c["output_tokens"] == 16).all()  # 0 output-length mismatches
        assert (np.diff(c["arrival_ns"]) >= 0).all()
        assert (c["first_token_ns"] > c["arrival_ns"]).all()
        assert (c["finish_ns"] >= c["first_token_ns"]).all()
    m = _server_metrics()
    total = sum(int(c["success"].sum()) for c in cols)
    assert total == m['tidal:request_success_total{finished_reason="length"}']
    assert sum(int(c["prompt_len"].sum()) for c in cols) == m["tidal:prompt_tokens_total"]
    assert sum(int(c["output_tokens"].sum()) for c in cols) == m["tidal:generation_tokens_total"]
    assert m['vllm:generation_tokens_total{model_name="tiny-llama"}'] == m[
        "tidal:generation_tokens_total"
    ]


def test_a_client_file_replays_as_a_trace():
    rs = load_trace(GUIDELLM)
    assert len(rs.arrival_ns) == 8
    assert rs.arrival_ns[0] == 0
    assert (rs.output_len == 16).all()
    assert load_measured(AIPERF).prompt_len.tolist() == [32] * 8
    assert len(measured_columns(AIPERF)["finish_ns"]) == 8


def _vllm_file(path: Path, start_times: bool = True) -> Path:
    """A file in the layout of ``vllm bench serve --save-result --save-detailed`` (written
    here: vLLM does not install on this machine); request 1 failed."""
    d = {
        "date": "20261207-120000",
        "backend": "vllm",
        "model_id": "tiny-llama",
        "num_prompts": 3,
        "completed": 2,
        "input_lens": [10, 20, 30],
        "output_lens": [4, 0, 5],
        "ttfts": [0.05, 0.0, 0.07],
        "itls": [[0.01, 0.01, 0.01], [], [0.02] * 4],
        "generated_texts": ["abcd", "", "abcde"],
        "errors": ["", "HTTP 429: too many requests", ""],
    }
    if start_times:
        d["start_times"] = [100.0, 100.5, 101.0]
    path.write_text(json.dumps(d))
    return path


def test_a_vllm_detailed_result_is_read_per_request(tmp_path):
    p = _vllm_file(tmp_path / "vllm.json")
    assert client_format(p) == "vllm"
    c = read_client_results(p)
    assert c["arrival_ns"].tolist() == [0, 500_000_000, 1_000_000_000]
    assert c["success"].tolist() == [True, False, True]
    assert c["output_tokens"].tolist() == [4, 0, 5]
    assert c["first_token_ns"].tolist() == [50_000_000, -1, 1_070_000_000]
    assert c["finish_ns"][2] == 1_000_000_000 + 70_000_000 + 80_000_000
    assert load_measured(p).output_len.tolist() == [4, 5]  # the failed one is left out
    with pytest.raises(ConfigError, match="start_times"):
        read_client_results(_vllm_file(tmp_path / "old.json", start_times=False))


def test_fidelity_measured_takes_a_client_file(tmp_path):
    from tidal.experiments.fidelity_measured import run_measured_fidelity

    result = run_measured_fidelity(
        GUIDELLM,
        tmp_path / "fid",
        model="tiny-llama",
        gpu="h100",
        tp=None,
        profile=None,
        token_budget=512,
        max_seqs=64,
        batching="mb",
        num_kv_blocks=512,
        block_size=16,
        gpu_memory_utilization=None,
        seed=0,
    )
    assert result["num_replayed"] == 8
    assert (tmp_path / "fid" / "fidelity.json").is_file()
    assert result["measured_config"] == {}  # no tidal summary.json beside a client file


@pytest.mark.slow
@pytest.mark.engine
def test_aiperf_against_tidal_serve_counts_what_the_server_counts(tmp_path):
    """aiperf (when installed: TIDAL_AIPERF or on PATH) against a live ``tidal serve``;
    slow: aiperf does not install within a minute here."""
    exe = os.environ.get("TIDAL_AIPERF") or shutil.which("aiperf")
    if exe is None:
        pytest.skip("aiperf is not installed")
    from tests.api.conftest import metric, start_server, stop_server
    from tidal.runtime.tokenizer import HF_DIR

    live, thread = start_server()
    try:
        port = live.url.rsplit(":", 1)[1]
        art = tmp_path / "art"
        cmd = [exe, "profile", "--model", "tiny-llama", "--url", f"http://127.0.0.1:{port}",
               "--endpoint-type", "completions", "--streaming", "--tokenizer", str(HF_DIR),
               "--request-count", "6", "--synthetic-input-tokens-mean", "24",
               "--synthetic-input-tokens-stddev", "0", "--output-tokens-mean", "12",
               "--output-tokens-stddev", "0", "--concurrency", "2", "--artifact-dir", str(art),
               "--extra-inputs", "ignore_eos:true"]  # fmt: skip
        subprocess.run(cmd, check=True, timeout=600, capture_output=True)
        import httpx2

        text = httpx2.get(live.url + "/metrics").text
        cols = read_client_results(art / "profile_export.jsonl")
        assert int(cols["output_tokens"].sum()) == metric(text, "tidal:generation_tokens_total")
        assert int(cols["prompt_len"].sum()) == metric(text, "tidal:prompt_tokens_total")
        csv = (art / "profile_export_aiperf.csv").read_text()
        assert "OSL Mismatch Count,0.00" in csv
    finally:
        stop_server(live, thread)
