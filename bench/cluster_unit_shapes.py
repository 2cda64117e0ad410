"""Unit shapes of one model in a cluster (issue 29 item 5 leftovers): aggregated instances vs
disaggregated units with equal or per-pool TP (``id:TPp/TPd:PpDd``), each with and without
speculative decoding, on the Azure code trace. Every shape gets the same node; the dedicated
placement fills it with as many instances as the load needs (aligned groups). Prints a
Markdown table and writes JSON lines to ``--out``.

    nice python bench/cluster_unit_shapes.py --model llama-2-13b --cluster 1x8:h100 \
        --rates 5,12 --out bench/results/cluster_unit_shapes.jsonl
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from tidal.sim.config import load_config
from tidal.sim.run import run_simulation

AZURE = "azure_llm_2023/AzureLLMInferenceTrace_code.csv.gz"
SHAPES = ("2", "4", "2:1p1d", "4:1p1d", "1/2:2p1d", "2/1:1p2d")
"""``id:<shape>`` entries: aggregated TP2 and TP4, 1p1d units at TP2 and TP4, and two units
with per-pool TP on 4 GPUs."""
KEYS = ("ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "tpot_p99_s", "e2e_p50_s", "num_completed",
        "gpu_seconds", "kv_transfer_bytes", "spec_decode_mean_acceptance_length")  # fmt: skip


def run(args: argparse.Namespace, shape: str, rate: float, spec: bool) -> dict[str, Any]:
    data: dict[str, Any] = {
        "seed": args.seed,
        "workload": {"trace": AZURE},
        "cluster": {
            "spec": args.cluster, "models": [f"{args.model}:{shape}"], "placement": "dedicated",
            "warmup_s": 20, "mix": {"rate": rate, "alpha": 1.0, "replay_s": args.replay_s},
        },
    }  # fmt: skip
    if spec:
        data["speculative"] = {"method": "ngram", "num_speculative_tokens": 3,
                               "acceptance_rate": args.alpha}  # fmt: skip
    t0 = time.perf_counter()
    res = run_simulation(load_config(data))
    row = {k: res.metrics.get(k) for k in KEYS}
    insts = res.extras["controller"].instance_table()
    row.update(shape=shape, rate=rate, spec=spec, instances=len(insts["num_gpus"]),
               gpus=int(sum(insts["num_gpus"])), wall_s=time.perf_counter() - t0)  # fmt: skip
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="llama-2-13b")
    ap.add_argument("--cluster", default="1x8:h100")
    ap.add_argument("--rates", default="5,12")
    ap.add_argument("--replay-s", type=float, default=300.0)
    ap.add_argument("--alpha", type=float, default=0.7, help="n-gram acceptance rate (k = 3)")
    ap.add_argument("--shapes", default=",".join(SHAPES).replace(",", ";"),
                    help="';'-separated shapes")  # fmt: skip
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    print("| shape | rate | spec | inst | GPUs | TTFT p50 | TTFT p99 | TPOT p50 | TPOT p99 | "
          "E2E p50 | done | accept len |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    rows = []
    for rate in (float(r) for r in args.rates.split(",")):
        for shape in args.shapes.split(";"):
            for spec in (False, True):
                r = run(args, shape, rate, spec)
                rows.append(r)
                acc = r["spec_decode_mean_acceptance_length"]
                print(f"| {shape} | {rate:g} | {'ngram k3' if spec else '-'} | {r['instances']} | "
                      f"{r['gpus']} | {r['ttft_p50_s'] * 1e3:.0f} ms | "
                      f"{r['ttft_p99_s'] * 1e3:.0f} ms | {r['tpot_p50_s'] * 1e3:.1f} ms | "
                      f"{r['tpot_p99_s'] * 1e3:.1f} ms | {r['e2e_p50_s']:.2f} s | "
                      f"{r['num_completed']} | {f'{acc:.2f}' if acc else '-'} |", flush=True)
    if args.out is not None:
        with args.out.open("w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
