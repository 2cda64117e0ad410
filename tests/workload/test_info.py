"""trace_info reproduces the statistics published in shared/traces/README.md."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tidal.core.errors import ConfigError
from tidal.workload.base import RequestSet
from tidal.workload.info import request_stats, trace_info


def _close(value: float, published: float, decimals: int) -> bool:
    """``published`` is ``value`` rounded to ``decimals`` places, give or take one unit in the
    last place: the README's numbers were sometimes rounded twice (conv peak/mean at 60 s is
    1.5446 → 1.545 → 1.55; code output p99 is 251.46 → 251.5 → 252)."""
    return abs(value - published) <= 10.0**-decimals + 1e-9


# (file, rows, span min, mean rate, IAT CV, IDC 1/10/60 s or None, peak/mean 1/60 s or None,
#  prompt mean/p50/p90/p99/max, output mean/p50/p90/p99/max) — README tables, as printed.
README = {
    "azure_llm_2023/AzureLLMInferenceTrace_code.csv.gz": (
        8819,
        57.3,
        2.57,
        13.2,
        (13.2, 71.3, 160),
        (26.1, 4.16),
        (2048, 1469, 5188, 7436, 7437),
        (27.9, 13, 55, 252, 1899),
    ),
    "azure_llm_2023/AzureLLMInferenceTrace_conv.csv.gz": (
        19366,
        58.4,
        5.53,
        1.09,
        (1.39, 4.0, 20.6),
        (2.89, 1.55),
        (1155, 1020, 2734, 4142, 14050),
        (211, 129, 424, 601, 1000),
    ),
    "mooncake_fast25/conversation_trace.jsonl.gz": (
        12031,
        59,
        3.40,
        3.03,
        (None, 2.09, 2.85),
        None,
        (12035, 6909, 27367, 85400, 126195),
        (343, 350, 597, 1119, 2000),
    ),
    "mooncake_fast25/synthetic_trace.jsonl.gz": (
        3993,
        17,
        3.91,
        1.01,
        (None, 1.37, 13.0),
        None,
        (15325, 11587, 38611, 66456, 191378),
        (149, 69, 389, 768, 893),
    ),
}


def _decimals(x: float) -> int:
    text = repr(float(x))
    return 0 if float(x).is_integer() else len(text.split(".")[1])


def _check(value: float, published: float) -> None:
    assert _close(value, published, _decimals(published)), (value, published)


@pytest.mark.parametrize("name", list(README))
def test_readme_statistics(traces: Path, name: str) -> None:
    rows, span_min, rate, cv, idc, peak, prompt, output = README[name]
    info = trace_info(traces / name)
    assert info["rows"] == rows
    _check(info["span_s"] / 60, span_min)
    _check(info["mean_rate"], rate)
    _check(info["iat_cv"], cv)
    for w, published in zip((1, 10, 60), idc, strict=True):
        if published is not None:
            _check(info[f"idc_{w}s"], published)
    for w, published in zip((1, 60), peak or (None, None), strict=True):
        if published is not None:
            _check(info[f"peak_to_mean_{w}s"], published)
    for prefix, published in (("prompt", prompt), ("output", output)):
        for key, p in zip(("mean", "p50", "p90", "p99", "max"), published, strict=True):
            _check(info[f"{prefix}_{key}"], p)


# model: clients, windows, mean total rate, rate p5/p50/p95, peak/mean, rate-weighted CV
SERVEGEN = {
    "m-large": ("language", 162, 2016, 196, (84, 187, 342), 2.98, 3.4),
    "m-mid": ("language", 109, 2016, 1790, (22, 1901, 2682), 1.92, 12.0),
    "m-small": ("language", 43, 2016, 1174, (621, 1159, 1756), 3.30, 3.6),
    "deepseek-r1": ("reason", 73, 144, 16.0, (7.7, 13.3, 32.7), 2.66, 2.3),
    "mm-image": ("multimodal", 35, 144, 9.5, (5.5, 9.2, 12.9), 1.40, 2.2),
}


@pytest.mark.parametrize("model", list(SERVEGEN))
def test_servegen_summary(traces: Path, model: str) -> None:
    category, clients, windows, rate, pcts, peak, cv = SERVEGEN[model]
    info = trace_info(traces / f"servegen/servegen_{category}_{model}_trace_csv.tar.gz")
    assert info["format"] == "servegen"
    assert info["model"] == model
    assert info["clients"] == clients
    assert info["windows"] == windows
    assert info["span_s"] == windows * 600
    _check(info["mean_rate"], rate)
    for key, published in zip(("rate_p5", "rate_p50", "rate_p95"), pcts, strict=True):
        _check(info[key], published)
    _check(info["peak_to_mean_600s"], peak)
    _check(info["rate_weighted_cv"], cv)
    assert info["expected_requests"] == pytest.approx(info["mean_rate"] * info["span_s"])


def test_request_stats_small() -> None:
    rs = RequestSet(
        np.array([0, 1, 2, 3, 10]) * 10**9, np.array([1, 2, 3, 4, 5]), np.array([5, 5, 5, 5, 5])
    )
    s = request_stats(rs)
    assert s["rows"] == 5
    assert s["span_s"] == 10
    assert s["mean_rate"] == 0.4
    # 1 s bins: 11 bins with counts 1,1,1,1,0,…,0,1 → mean 5/11, variance 5/11 − (5/11)².
    assert s["idc_1s"] == pytest.approx(1 - 5 / 11)
    assert s["peak_to_mean_1s"] == pytest.approx(11 / 5)
    assert s["prompt_p50"] == 3
    assert s["output_max"] == 5


def test_unknown_format(traces: Path) -> None:
    with pytest.raises(ConfigError, match="trace_format"):
        trace_info(traces / "mooncake_fast25/synthetic_trace.jsonl.gz", fmt="burstgpt")
