"""Can a KV-safe MB match vLLM's MB where vLLM preempts? (issue 18, the grid's trade-off cells)

    nice python bench/ebplus_frontier.py

In the robustness grid's trade-off cells (``bench/robustness_grid.py``: ``tradeoff``) vLLM's MB
admits to N_max and preempts by recompute, up to 3 times per request. Preemption's recompute is
wasted work, so an MB that admits only what fits might run as fast without it. Per cell this
prints, on the same KV cache (``memory.num_blocks`` pinned to the grid's plan at N_max = 1024):

* MB at N_max (the grid's baseline) and at static running caps N (``max_seqs``), the
  preemption/throughput frontier of any count cap;
* EB⁺'s MB mode held in MB (``delta`` = 10⁹: no switch) with the KV forecast alone
  (``mb_count_cap: false``) at ε = 0.01 and 0.1: admission by the age-conditioned forecast;
* EB and EB⁺ with the defaults.

Writes ``bench/out/ebplus_frontier.json``.
"""

from __future__ import annotations

from typing import Any

import robustness_grid as rg
from _common import PINNED_PERF_MODEL, md_table, save

from tidal.sim.config import load_config
from tidal.sim.run import run_simulation

CELLS = {
    ("l40s", "llama-3.1-70b", "sharegpt", 128): (6, 8, 10, 12),
    ("h100", "qwen3-30b-a3b", "DH", 512): (120, 135, 150, 170),
    ("h100", "qwen3-30b-a3b", "BAL", 512): (100, 120, 140, 160),
    ("b200", "llama-3.1-70b", "sharegpt", 512): (20, 30, 40, 60),
}
N = 1500


def run(gpu: str, model: str, mix: str, c: int, **sched: Any) -> dict[str, Any]:
    blocks = sched.pop("blocks", None)
    data: dict[str, Any] = {
        "model": model,
        "gpu": gpu,
        "tp": rg.fit_tp(model, gpu),
        "interference": True,
        "perf_model": PINNED_PERF_MODEL,
        "workload": {"num_requests": N, "concurrency": c, "warmup_requests": 100, **rg.MIXES[mix]},
        "scheduler": {"token_budget": 14336, "max_seqs": 1024, **sched},
    }
    if blocks is not None:
        data["memory"] = {"num_blocks": blocks}
    m = run_simulation(load_config(data)).metrics
    return {"tok_s": m["token_throughput"], "preempt": m["num_preemptions"] / N, "metrics": m}


def main() -> None:
    out: dict[str, Any] = {}
    rows = []
    for (gpu, model, mix, c), caps in CELLS.items():
        mb = run(gpu, model, mix, c, batching="mb")
        blocks = mb["metrics"]["kv_capacity_tokens"] // 16
        res = {"MB N_max": mb}
        for n in caps:
            res[f"MB N={n}"] = run(gpu, model, mix, c, batching="mb", max_seqs=n, blocks=blocks)
        for eps in (0.01, 0.1):
            eb = {"delta": 1e9, "mb_count_cap": False, "mb_eps": eps}
            res[f"forecast MB ε={eps}"] = run(gpu, model, mix, c, batching="ebplus", eb=eb)
        res["EB"] = run(gpu, model, mix, c, batching="eb")
        res["EB⁺"] = run(gpu, model, mix, c, batching="ebplus")
        label = f"{gpu} {model} {mix} c={c}"
        out[label] = {k: {"tok_s": v["tok_s"], "preempt": v["preempt"]} for k, v in res.items()}
        for k, v in res.items():
            ratio = v["tok_s"] / mb["tok_s"]
            rows.append([label, k, f"{v['tok_s']:,.0f}", f"{ratio:.3f}", f"{v['preempt']:.2%}"])
    print(md_table(["cell", "policy", "tok/s", "/ MB N_max", "preemptions / request"], rows))
    save("ebplus_frontier", out)


if __name__ == "__main__":
    main()
