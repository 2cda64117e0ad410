"""A measured run in the simulator's layout, so reports, plots, replay and fidelity read it.

``requests.parquet`` has the recorder's columns (:class:`tidal.sim.recorder.RequestRecorder`):
``arrival_ns`` is the send time, ``first_token_ns``/``finish_ns`` the client's (−1 for a failed
request), ``prompt_len`` the server's prompt tokens (usage; the client's count when absent),
``output_len`` the ``max_tokens`` sent, ``output_tokens`` those received; ``first_scheduled_ns``
is −1 (a client cannot see it) and ``num_preemptions`` 0; plus ``success``, ``error`` and the
per-request ``itl_ns`` list. All times are ns from the run's first send.

``summary.json`` metrics: those of :func:`tidal.core.metrics.summarize` (TTFT, TPOT and E2E
percentiles and means, throughputs, goodput, SLO attainment), with ITL percentiles over every
inter-chunk gap (each weighs one), plus ``num_failed``, ``ttft_std_s``, ``tpot_std_s``,
``e2e_std_s``, ``itl_mean_s``, ``itl_std_s``. Goodput uses vLLM's ``--goodput`` SLOs
(``ttft``, ``tpot``, ``e2el``, ms): a completed request is good when it meets every one given.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tidal.core.errors import ConfigError
from tidal.core.metrics import PCTS, request_latencies, summarize
from tidal.measure.client import RequestResult
from tidal.measure.dataset import BenchRequest

GOODPUT_KEYS = ("ttft", "tpot", "e2el")


def parse_goodput(items: list[str] | None) -> dict[str, float]:
    """``["ttft:500", "tpot:50"]`` (milliseconds) → ``{"ttft": 0.5, "tpot": 0.05}`` seconds."""
    out: dict[str, float] = {}
    for item in items or []:
        for part in item.split():
            key, sep, value = part.partition(":")
            try:
                ms = float(value)
            except ValueError:
                ms = float("nan")
            if not sep or key not in GOODPUT_KEYS or not ms > 0:
                raise ConfigError(
                    "goodput", f"bad SLO {part!r}", "give KEY:MS with KEY in ttft, tpot, e2el"
                )
            out[key] = ms / 1e3
    return out


def columns(
    reqs: list[BenchRequest], results: list[RequestResult], start_ns: int
) -> dict[str, Any]:
    def rel(t: int) -> int:
        return t - start_ns if t >= 0 else -1

    ok = [r.success for r in results]
    return {
        "request_id": np.arange(len(reqs), dtype=np.int64),
        "arrival_ns": np.array([rel(r.sent_ns) for r in results], dtype=np.int64),
        "prompt_len": np.array(
            [
                r.prompt_tokens if r.prompt_tokens > 0 else q.prompt_len
                for q, r in zip(reqs, results, strict=True)
            ],
            dtype=np.int64,
        ),
        "output_len": np.array([q.output_len for q in reqs], dtype=np.int64),
        "first_scheduled_ns": np.full(len(reqs), -1, dtype=np.int64),
        "first_token_ns": np.array(
            [rel(r.first_token_ns) if k else -1 for r, k in zip(results, ok, strict=True)],
            dtype=np.int64,
        ),
        "finish_ns": np.array(
            [rel(r.finish_ns) if k else -1 for r, k in zip(results, ok, strict=True)],
            dtype=np.int64,
        ),
        "output_tokens": np.array(
            [r.output_tokens if k else 0 for r, k in zip(results, ok, strict=True)],
            dtype=np.int64,
        ),
        "num_preemptions": np.zeros(len(reqs), dtype=np.int64),
        "instance": np.zeros(len(reqs), dtype=np.int64),
        "success": np.array(ok, dtype=bool),
        "error": [r.error for r in results],
        "itl_ns": [list(r.itl_ns) if k else [] for r, k in zip(results, ok, strict=True)],
    }


def _std(x: np.ndarray) -> float | None:
    x = x[np.isfinite(x)]
    return float(np.std(x)) if len(x) else None


def measured_metrics(cols: dict[str, Any], goodput: dict[str, float]) -> dict[str, Any]:
    slo_ttft = goodput.get("ttft", float("inf"))
    slo_tpot = goodput.get("tpot", float("inf"))
    m = summarize(cols, slo_ttft, slo_tpot)
    n = len(cols["success"])
    done = np.asarray(cols["success"])
    m["num_failed"] = int(n - done.sum())
    lat = request_latencies(cols)
    for name in ("ttft", "tpot", "e2e"):
        m[f"{name}_std_s"] = _std(lat[f"{name}_s"][done])
    gaps = np.array([g for row in cols["itl_ns"] for g in row], dtype=np.float64) / 1e9
    if len(gaps):
        for p, v in zip(PCTS, np.percentile(gaps, PCTS), strict=True):
            m[f"itl_p{p}_s"] = float(v)
        m["itl_mean_s"] = float(gaps.mean())
        m["itl_std_s"] = float(gaps.std())
    else:
        m["itl_mean_s"] = m["itl_std_s"] = None
    if "e2el" in goodput and m["duration_s"]:
        e2e = np.nan_to_num(lat["e2e_s"], nan=np.inf)
        ttft = np.nan_to_num(lat["ttft_s"], nan=np.inf)
        tpot = np.nan_to_num(lat["tpot_s"], nan=0.0)
        good = done & (e2e <= goodput["e2el"]) & (ttft <= slo_ttft) & (tpot <= slo_tpot)
        m["goodput"] = int(good.sum()) / m["duration_s"]
        m["slo_attainment"] = int(good.sum()) / n
    if not goodput:  # no SLO given: goodput is not defined (vLLM prints none)
        m["goodput"] = m["slo_attainment"] = None
    return m
