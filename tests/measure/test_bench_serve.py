"""``tidal bench serve`` against a live ``tidal serve``: every request accounted for, and the
client's TTFT / TPOT agree with the server's own ``/metrics`` histograms."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import polars as pl
import pytest

pytest.importorskip("httpx2")

from typer.testing import CliRunner

from tests.api.conftest import start_server, stop_server, wait_idle
from tidal.cli import app
from tidal.cli.bench import run_bench
from tidal.measure.dataset import build_requests
from tidal.measure.runner import BenchSettings, send_offsets

pytestmark = pytest.mark.engine


def scrape(url: str) -> dict[str, float]:
    import httpx2

    text = httpx2.get(url + "/metrics").text
    out = {}
    for line in text.splitlines():
        m = re.match(r"^(tidal:[a-z_]+(?:\{[^}]*\})?) ([0-9.e+-]+)$", line)
        if m:
            out[m.group(1)] = float(m.group(2))
    return out


def buckets(metrics: dict[str, float], name: str) -> dict[float, float]:
    """Cumulative counts of a Prometheus histogram by upper bound."""
    out = {}
    for k, v in metrics.items():
        m = re.match(rf"^tidal:{name}_bucket\{{le=\"([^\"]+)\"\}}$", k)
        if m:
            out[float(m.group(1))] = v
    return out


def warm(url: str) -> dict[str, float]:
    """A few requests first (the server's first ones pay one-off costs), then a scrape."""
    import httpx2

    body = {"model": "tiny-llama", "prompt": "warm up", "max_tokens": 4}
    for _ in range(3):
        assert httpx2.post(url + "/v1/completions", json=body, timeout=60).status_code == 200
    return scrape(url)


def diff(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    return {k: v - before.get(k, 0.0) for k, v in after.items()}


def check_against_server(summary_metrics, cols, server, n_sent):
    """Client times include HTTP and SSE delivery, so each client latency is >= the server's:
    the client's histogram lies to the right of the server's, by at most ``slack``."""
    m = summary_metrics
    assert m["num_completed"] + m["num_failed"] == m["num_requests"] == n_sent
    done = np.asarray(cols["success"])
    ttft = (cols["first_token_ns"][done] - cols["arrival_ns"][done]) / 1e9
    assert server["tidal:time_to_first_token_seconds_count"] == m["num_completed"]
    server_mean = server["tidal:time_to_first_token_seconds_sum"] / m["num_completed"]
    slack = 0.25
    assert server_mean <= ttft.mean() <= server_mean + slack
    for le, count in buckets(server, "time_to_first_token_seconds").items():
        if math.isinf(le):
            continue
        assert (ttft <= le).sum() <= count  # client latencies are no shorter
        assert (ttft <= le + slack).sum() >= count
    # TPOT: the server's (finish − first)/(n − 1) against the client's over the same tokens
    out_tok = cols["output_tokens"][done]
    multi = out_tok > 1
    tpot = (
        (cols["finish_ns"][done] - cols["first_token_ns"][done])[multi] / 1e9 / (out_tok[multi] - 1)
    )
    s_tpot = (
        server["tidal:time_per_output_token_seconds_sum"]
        / server["tidal:time_per_output_token_seconds_count"]
    )
    assert tpot.mean() == pytest.approx(s_tpot, rel=0.5)
    # ITL: the gaps between a request's text chunks add up to its first-to-last span
    for i in np.flatnonzero(done)[:10]:
        gaps = cols["itl_ns"][i]
        span = cols["finish_ns"][i] - cols["first_token_ns"][i]
        assert sum(gaps) <= span


def test_bench_in_process_accounts_for_every_request_and_matches_metrics(tmp_path):
    live, thread = start_server(num_kv_blocks=512, max_seqs=16, token_budget=256)
    try:
        reqs = build_requests(
            "random",
            40,
            3,
            dataset_path=None,
            input_len=48,
            output_len=12,
            range_ratio=0.5,
            sharegpt_output_len=None,
            chat=False,
        )
        s = BenchSettings(live.url, "/v1/completions", "tiny-llama", 30.0, 1.0, 8, 3, True)
        before = warm(live.url)
        summary = run_bench(s, reqs, {"ttft": 2.0}, tmp_path, progress=False)
        wait_idle(live.driver)
        server = diff(scrape(live.url), before)
    finally:
        stop_server(live, thread)
    cols = pl.read_parquet(tmp_path / "requests.parquet").to_dict(as_series=False)
    cols = {k: np.asarray(v) if k != "itl_ns" else v for k, v in cols.items()}
    m = summary["metrics"]
    assert m["num_failed"] == 0
    assert m["num_completed"] == 40
    # ignore_eos: every request ran to max_tokens, as the server reports in its usage
    assert (cols["output_tokens"] == cols["output_len"]).all()
    assert (cols["prompt_len"] == [r.prompt_len for r in reqs]).all()  # ids, no BOS added
    assert server["tidal:generation_tokens_total"] == cols["output_tokens"].sum()
    check_against_server(m, cols, server, 40)
    on_disk = json.loads((tmp_path / "summary.json").read_text())
    assert on_disk["metrics"]["num_requests"] == 40
    assert on_disk["config"]["backend"] == "measured"


def test_rejected_requests_are_counted_as_failed(tmp_path):
    live, thread = start_server(max_queue=1, max_seqs=1, token_budget=64, num_kv_blocks=64)
    try:
        reqs = build_requests(
            "random",
            12,
            0,
            dataset_path=None,
            input_len=16,
            output_len=8,
            range_ratio=0.0,
            sharegpt_output_len=None,
            chat=False,
        )
        s = BenchSettings(live.url, "/v1/completions", "tiny-llama", math.inf, 1.0, None, 0, True)
        summary = run_bench(s, reqs, {}, tmp_path, progress=False)
        wait_idle(live.driver)
        server = scrape(live.url)
    finally:
        stop_server(live, thread)
    m = summary["metrics"]
    assert m["num_failed"] >= 1
    assert m["num_completed"] + m["num_failed"] == 12
    assert server["tidal:request_rejected_total"] == m["num_failed"]
    errors = pl.read_parquet(tmp_path / "requests.parquet")["error"].to_list()
    assert sum("HTTP 429" in e for e in errors) == m["num_failed"]
    assert summary["failure_reasons"] == {"HTTP 429": m["num_failed"]}  # the reason, counted
    saved = json.loads((tmp_path / "summary.json").read_text())
    assert saved["failure_reasons"] == {"HTTP 429": m["num_failed"]}


def test_bench_cli_takes_vllm_forms(tmp_path):
    """vLLM's forms: --goodput with several SLOs after one flag, --host/--port, --backend
    openai-chat, --percentile-metrics/--metric-percentiles (before: refused)."""
    live, thread = start_server()
    try:
        port = live.url.rsplit(":", 1)[1]
        args = ["bench", "serve", "--host", "127.0.0.1", "--port", port, "--backend",
                "openai-chat", "--num-prompts", "4", "--random-input-len", "16",
                "--random-output-len", "4", "--ignore-eos", "--goodput", "ttft:5000",
                "tpot:1000", "--percentile-metrics", "ttft,e2el", "--metric-percentiles",
                "50,95", "--result-dir", str(tmp_path)]  # fmt: skip
        res = CliRunner().invoke(app, args)
        assert res.exit_code == 0, res.output
        bad = CliRunner().invoke(app, [*args[:6], "--backend", "tgi"])
        assert bad.exit_code == 2
        assert "backend" in bad.output
        bad = CliRunner().invoke(app, [*args[:6], "--goodput", "ttft:5", "oops"])
        assert bad.exit_code == 2
        assert "oops" in bad.output
    finally:
        stop_server(live, thread)
    summary = json.loads((tmp_path / "summary.json").read_text())
    cfg, m = summary["config"], summary["metrics"]
    assert cfg["endpoint"] == "/v1/chat/completions"
    assert cfg["base_url"] == live.url
    assert cfg["goodput_slo_s"] == {"ttft": 5.0, "tpot": 1.0}
    assert m["num_completed"] == 4
    assert m["ttft_p95_s"] >= m["ttft_p50_s"] > 0
    assert m["e2el_p50_s"] > 0
    assert "percentiles: ttft" in res.output


def test_send_offsets_follow_vllm_semantics():
    reqs = build_requests(
        "random",
        4000,
        0,
        dataset_path=None,
        input_len=4,
        output_len=4,
        range_ratio=0.0,
        sharegpt_output_len=None,
        chat=False,
    )
    assert (send_offsets(reqs, math.inf, 1.0, 0) == 0).all()
    for burst in (0.5, 1.0, 4.0):
        gaps = np.diff(send_offsets(reqs, 10.0, burst, 1))
        assert gaps.mean() == pytest.approx(0.1, rel=0.06)
        # Gamma(k, θ): CV = 1/sqrt(k)
        assert gaps.std() / gaps.mean() == pytest.approx(1 / math.sqrt(burst), rel=0.08)


def test_bench_cli_against_a_tidal_serve_subprocess(tmp_path):
    import socket
    import subprocess
    import sys
    import time

    import httpx2

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from tidal.cli import app; app()",
            "serve",
            "tiny-llama",
            "--port",
            str(port),
            "--threads",
            "1",
            "--num-kv-blocks",
            "512",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                if httpx2.get(url + "/health").status_code == 200:
                    break
            except httpx2.TransportError:
                pass
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
            assert time.monotonic() < deadline, "tidal serve did not start"
            time.sleep(0.2)
        before = warm(url)
        out = tmp_path / "bench"
        res = CliRunner().invoke(
            app,
            [
                "bench",
                "serve",
                "--base-url",
                url,
                "--num-prompts",
                "24",
                "--request-rate",
                "20",
                "--burstiness",
                "2",
                "--max-concurrency",
                "6",
                "--random-input-len",
                "32",
                "--random-output-len",
                "10",
                "--ignore-eos",
                "--seed",
                "5",
                "--goodput",
                "ttft:5000",
                "--save-result",
                "--result-dir",
                str(out),
            ],
        )
        assert res.exit_code == 0, res.output
        server = diff(scrape(url), before)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    summary = json.loads((out / "summary.json").read_text())
    m = summary["metrics"]
    assert summary["config"]["model"] == "tiny-llama"  # from GET /v1/models
    assert m["goodput"] is not None
    assert 0 < m["slo_attainment"] <= 1
    cols = pl.read_parquet(out / "requests.parquet").to_dict(as_series=False)
    cols = {k: np.asarray(v) if k != "itl_ns" else v for k, v in cols.items()}
    check_against_server(m, cols, server, 24)
