"""A disaggregated unit inside one node vs across nodes (issue 29 items 1 and 5; docs/design/
disagg-cluster-nodes.md): the same model on 2 nodes × 8 GPUs, served by 1p1d units at TP
4/4 under dedicated placement — ``unit_pools: auto`` puts each 8-GPU unit inside a node (KV
over NVLink), ``apart`` puts every unit's prefill pool on node 0 and its decode pool on node 1
(KV over the cluster's NICs: ``--link``, one NIC per GPU, or ``--nics`` per node shared).
Both layouts use the same 16 GPUs (two units). Reports TTFT p50/p99, TPOT p50 and the
per-request KV transfer time (end − start, the transfer's own time plus any queueing on the
links) on a slice of the Azure trace. Prints a Markdown table and writes JSON lines to
``--out``.

    nice python bench/cluster_nodes.py --model llama-2-13b --rates 4,12 --prompt-cap 8192 \
        --max-model-len 10240 --out bench/results/cluster_nodes.jsonl
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from tidal.sim.config import load_config
from tidal.sim.run import run_simulation

TRACES = {
    "code": "azure_llm_2023/AzureLLMInferenceTrace_code.csv.gz",
    "conv": "azure_llm_2023/AzureLLMInferenceTrace_conv.csv.gz",
}
KEYS = ("ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "tpot_p99_s", "num_completed",
        "num_requests", "kv_transfer_bytes")  # fmt: skip


def layouts(args: argparse.Namespace) -> list[tuple[str, str, dict[str, Any]]]:
    """(label, unit_pools, network) of each run."""
    net: dict[str, Any] = {"link": args.link}
    out = [("one node (NVLink)", "auto", {}), (f"two nodes ({args.link}, 1 NIC/GPU)", "apart", net)]
    if args.nics:
        out.append((f"two nodes ({args.link}, {args.nics} NIC/node)", "apart",
                    {**net, "nics_per_node": args.nics}))  # fmt: skip
    return out


def run(args: argparse.Namespace, rate: float, pools: str, net: dict[str, Any]) -> dict[str, Any]:
    """One cluster run; the metrics of the unit's model (the cluster's when it is alone)."""
    extra = [m for m in args.extra_models.split(",") if m]
    data: dict[str, Any] = {
        "seed": args.seed,
        "workload": {"trace": TRACES[args.trace]},
        "cluster": {
            "spec": args.cluster, "models": [f"{args.model}:{args.tp}/{args.tp}:1p1d", *extra],
            "placement": args.placement, "warmup_s": 20, "unit_pools": pools, "network": net,
            "max_model_len": args.max_model_len,
            "mix": {"rate": rate, "alpha": 1.0, "replay_s": args.replay_s,
                    "prompt_cap": args.prompt_cap},
        },
    }  # fmt: skip
    t0 = time.perf_counter()
    res = run_simulation(load_config(data))
    mine = res.metrics if not extra else res.extras["summary"]["per_model"][args.model]
    row: dict[str, Any] = {k: mine.get(k, res.metrics.get(k)) for k in KEYS}
    cols = res.extras["controller"].backend.disagg.cols
    t = (cols.kv_transfer_end_ns - cols.kv_transfer_start_ns)[cols.kv_transfer_end_ns >= 0] / 1e6
    row.update(
        rate=rate, unit_pools=pools, network=net, transfers=int(t.size),
        placement=args.placement, extra_models=extra, trace=args.trace, model=args.model,
        transfer_p50_ms=float(np.percentile(t, 50)), transfer_p99_ms=float(np.percentile(t, 99)),
        transfer_mean_ms=float(t.mean()), wall_s=time.perf_counter() - t0,
    )  # fmt: skip
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="llama-2-13b")
    ap.add_argument("--tp", type=int, default=4, help="TP of each pool (1p1d)")
    ap.add_argument("--cluster", default="2x8:h100")
    ap.add_argument("--trace", choices=sorted(TRACES), default="code")
    ap.add_argument("--rates", default="4,12")
    ap.add_argument("--replay-s", type=float, default=300.0)
    ap.add_argument("--prompt-cap", type=int, default=1024,
                    help="cluster.mix.prompt_cap (the WarmServe artifact's 1024)")  # fmt: skip
    ap.add_argument("--max-model-len", type=int, default=2048)
    ap.add_argument("--link", default="ib-ndr", help="cluster.network.link across nodes")
    ap.add_argument("--nics", type=int, default=1,
                    help="also run with this many NICs per node, shared (0: skip)")  # fmt: skip
    ap.add_argument("--placement", default="dedicated")
    ap.add_argument("--extra-models", default="",
                    help="aggregated models beside the unit (comma list; metrics: the unit's)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    rows = []
    for rate in (float(r) for r in args.rates.split(",")):
        for label, pools, net in layouts(args):
            row = run(args, rate, pools, net)
            row["layout"] = label
            rows.append(row)
            if args.out:
                with args.out.open("a") as f:
                    f.write(json.dumps(row) + "\n")
    print(f"{args.model} 1p1d TP {args.tp}/{args.tp}, {args.cluster}, {args.placement}, Azure "
          f"{args.trace} {args.replay_s:g} s, prompts ≤ {args.prompt_cap}\n")  # fmt: skip
    print("| rate | layout | done | TTFT p50 | TTFT p99 | TPOT p50 | KV transfer p50 | p99 |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['rate']:g} | {r['layout']} | {r['num_completed']}/{r['num_requests']} "
            f"| {r['ttft_p50_s'] * 1e3:.1f} ms | {r['ttft_p99_s'] * 1e3:.1f} ms "
            f"| {r['tpot_p50_s'] * 1e3:.2f} ms | {r['transfer_p50_ms']:.3f} ms "
            f"| {r['transfer_p99_ms']:.3f} ms |"
        )


if __name__ == "__main__":
    main()
