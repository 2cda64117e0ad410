"""Prefill with cached context on the engine tables (``--perf-model auto``), before and after
docs/design/prefill-with-context.md: the same runs with the session-30 reading of a chunk
after p cached tokens (the fresh-prompt table at the FLOPs-equivalent length √(c·(2p + c)),
at the mean chunk of the step) and with today's (the table's rows p…p + c, floored at the
decode read of the KV, unequal chunks scaled by their causal work).

Prompt reuse as the README and ``bench/prefix_workloads.py`` write it: shared system prompts
and multi-turn sessions on ShareGPT lengths, H100, vLLM defaults; plus a run without reuse
(only chunked prefill and unequal chunks change there). Each row: TTFT, TPOT and E2E p50 and
the relative change.

    python bench/prefix_engine_ab.py [--requests N] [--only REGEX]
"""

from __future__ import annotations

import argparse
import math
import os
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from _common import md_table, save

from tidal.hardware.engine_perf import EnginePerfModel
from tidal.sim.config import load_config
from tidal.sim.run import run_simulation

SHAREGPT = {"length_dist": "empirical:sharegpt"}
CASES: dict[str, dict[str, Any]] = {
    "Llama-3.1-8B, shared prefix G=8 L=2048, 5 req/s (README)": {
        "workload": {**SHAREGPT, "rate": 5.0, "shared_prefix_groups": 8,
                     "shared_prefix_len": 2048},
    },
    "Llama-3.1-8B, sessions 5 turns, think 5 s, 0.5/s": {
        "workload": {**SHAREGPT, "rate": 0.5, "turns": 5, "think_time_s": 5.0},
    },
    "Llama-3.1-8B, shared prefix G=4 L=8192, 2 req/s": {
        "workload": {**SHAREGPT, "rate": 2.0, "shared_prefix_groups": 4,
                     "shared_prefix_len": 8192},
    },
    "Llama-3.1-8B, no reuse, 6 req/s": {"workload": {**SHAREGPT, "rate": 6.0}},
    "Qwen3-32B TP2, shared prefix G=8 L=2048, 3 req/s": {
        "model": "Qwen/Qwen3-32B", "tp": 2,
        "workload": {**SHAREGPT, "rate": 3.0, "shared_prefix_groups": 8,
                     "shared_prefix_len": 2048},
    },
    "Qwen3-32B TP2, sessions 5 turns, think 5 s, 0.3/s": {
        "model": "Qwen/Qwen3-32B", "tp": 2,
        "workload": {**SHAREGPT, "rate": 0.3, "turns": 5, "think_time_s": 5.0},
    },
    "DeepSeek-V3 H200 TP8, sessions 5 turns, think 5 s, 0.5/s": {
        "model": "deepseek-ai/DeepSeek-V3", "gpu": "h200", "tp": 8,
        "workload": {**SHAREGPT, "rate": 0.5, "turns": 5, "think_time_s": 5.0},
    },
}  # fmt: skip


def s30_attn_prefill_s(
    self: EnginePerfModel, prefill_tokens: int, prefill_ctx: int, num_prefills: int,
    prefill_attn: int = -1,
) -> float:  # fmt: skip
    """Session 30's reading: the table at (chunks, √(c̄·(2p̄ + c̄))), c̄ and p̄ the means (and
    no up-projection of an MLA chunk's cached context)."""
    if num_prefills == 0:
        return 0.0
    assert self._batch_pre is not None
    c = prefill_tokens / num_prefills
    s = (prefill_ctx - prefill_tokens) / num_prefills
    length = math.sqrt(c * (2.0 * s + c))
    return self.model.num_layers * self._batch_pre.at(num_prefills, length) * 1e-6


@contextmanager
def s30_rule() -> Iterator[None]:
    now = EnginePerfModel.attn_prefill_s
    EnginePerfModel.attn_prefill_s = s30_attn_prefill_s  # type: ignore[method-assign]
    try:
        yield
    finally:
        EnginePerfModel.attn_prefill_s = now  # type: ignore[method-assign]


def run(case: dict[str, Any], requests: int) -> dict[str, float]:
    cfg = {**case, "workload": {**case["workload"], "num_requests": requests},
           "perf_model": "auto", "seed": 1}  # fmt: skip
    res = run_simulation(load_config(cfg))
    m = res.metrics
    keys = ("ttft_p50_s", "tpot_p50_s", "e2e_p50_s", "ttft_mean_s", "prefix_cache_hit_rate")
    return {k: float(m.get(k, 0.0)) for k in keys}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--only", default="", help="regex on the case names")
    args = ap.parse_args()
    rows, data = [], {"load_before": os.getloadavg(), "requests": args.requests}
    t0 = time.perf_counter()
    for name, case in CASES.items():
        if args.only and not re.search(args.only, name):
            continue
        with s30_rule():
            before = run(case, args.requests)
        after = run(case, args.requests)
        data[name] = {"before": before, "after": after}

        def cell(k: str, b: dict[str, float] = before, a: dict[str, float] = after) -> str:
            return f"{1e3 * b[k]:.1f} → {1e3 * a[k]:.1f} ({100 * (a[k] / b[k] - 1):+.1f} %)"

        rows.append([name, f"{after['prefix_cache_hit_rate']:.3f}", cell("ttft_p50_s"),
                     cell("tpot_p50_s"), cell("e2e_p50_s")])  # fmt: skip
        print(rows[-1], flush=True)
    header = ["run", "hit rate", "TTFT p50 ms", "TPOT p50 ms", "E2E p50 ms"]
    print(md_table(header, rows))
    data["load_after"] = os.getloadavg()
    data["seconds"] = time.perf_counter() - t0
    print(f"load average: {os.getloadavg()}; {data['seconds']:.0f} s")
    save("prefix_engine_ab", data)


if __name__ == "__main__":
    main()
