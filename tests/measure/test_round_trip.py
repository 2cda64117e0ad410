"""Round trip: ``tidal bench serve`` against a live ``tidal serve tiny-llama``, its result
directory read back by the loader of ``tidal fidelity --measured``; the requests it keeps and
their prompt / output token counts are the ones the server's ``/metrics`` counted, per request
(the ``request_prompt_tokens`` / ``request_generation_tokens`` histograms) and in total."""

from __future__ import annotations

import math
import re

import pytest

pytest.importorskip("httpx2")

from typer.testing import CliRunner

from tests.api.conftest import start_server, stop_server, wait_idle
from tidal.cli import app
from tidal.experiments.fidelity_measured import measured_requests_path
from tidal.workload.measured import load_measured, measured_columns

pytestmark = pytest.mark.engine


def _samples(text: str, prefix: str) -> dict[str, float]:
    """``{name{labels}: value}`` of the exposition lines under one prefix (``tidal:``/``vllm:``)."""
    out = {}
    for line in text.splitlines():
        if line.startswith(prefix):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def _histogram(s: dict[str, float], name: str) -> dict[float, float]:
    """Cumulative counts of one histogram by upper bound (labels other than ``le`` ignored)."""
    out = {}
    for k, v in s.items():
        m = re.match(rf"^(?:tidal|vllm):{name}_bucket\{{(?:.*,)?le=\"([^\"]+)\"", k)
        if m:
            out[float(m.group(1))] = v
    return out


def _check(cols: dict, s: dict[str, float], prefix: str, label: str, n: int) -> None:
    """The kept requests against one name space of the server's metrics."""
    done = sum(v for k, v in s.items() if k.startswith(f"{prefix}request_success_total"))
    assert done == n
    assert s[f"{prefix}prompt_tokens_total{label}"] == cols["prompt_len"].sum()
    assert s[f"{prefix}generation_tokens_total{label}"] == cols["output_tokens"].sum()
    for name, col in (("request_prompt_tokens", "prompt_len"),
                      ("request_generation_tokens", "output_tokens")):  # fmt: skip
        hist = _histogram(s, name)
        assert hist, f"{prefix}{name} missing"
        assert hist[math.inf] == n
        for le, count in hist.items():  # per request: the same counts in every bucket
            assert count == (cols[col] <= le).sum(), (name, le)
        assert s[f"{prefix}{name}_sum{label}"] == cols[col].sum()


def test_bench_serve_result_round_trips_to_the_server_metrics(tmp_path):
    import httpx2

    live, thread = start_server(num_kv_blocks=512, max_seqs=8, token_budget=256)
    try:
        port = live.url.rsplit(":", 1)[1]
        out = tmp_path / "bench"
        # no --ignore-eos and a length range: the counts differ per request and EOS may stop one
        args = ["bench", "serve", "--host", "127.0.0.1", "--port", port, "--num-prompts", "12",
                "--random-input-len", "24", "--random-output-len", "10",
                "--random-range-ratio", "0.5", "--max-concurrency", "4", "--seed", "3",
                "--result-dir", str(out)]  # fmt: skip
        res = CliRunner().invoke(app, args)
        assert res.exit_code == 0, res.output
        wait_idle(live.driver)
        text = httpx2.get(live.url + "/metrics").text
    finally:
        stop_server(live, thread)
    path = measured_requests_path(out)  # what `tidal fidelity --measured DIR` reads
    cols = measured_columns(path)
    rs = load_measured(path)
    n = len(rs.prompt_len)
    assert n == 12  # every request completed and kept
    assert (rs.prompt_len == cols["prompt_len"]).all()
    assert (rs.output_len == cols["output_tokens"]).all()
    assert len(set(cols["prompt_len"].tolist())) > 1  # a real per-request check
    _check(cols, _samples(text, "tidal:"), "tidal:", "", n)
    _check(cols, _samples(text, "vllm:"), "vllm:", '{model_name="tiny-llama"}', n)
