"""Multi-model cluster benchmarks (issue 5, warmserve.md §3.6–3.7). Prints Markdown tables.

    python bench/cluster_bench.py ttft      # WarmServe vs ServerlessLLM P99 TTFT per model
    python bench/cluster_bench.py capacity  # highest rate within the SLO, WarmServe vs MuxServe
    python bench/cluster_bench.py compare --rate 4 --alpha 1   # all four placements
    python bench/cluster_bench.py ablation  # ablations (a)-(f)
    python bench/cluster_bench.py long --days 14 --rate 0.5   # ServeGen-driven multi-day run

All runs: 2x8 H100, Llama-2 7B/7B/13B/70B (TP 1/1/2/4), the artifact's Azure mix (20-minute
replay of the 2023 trace, see tidal.workload.multimodel), seed 0.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
from _common import PINNED_PERF_MODEL

from tidal.cluster.config import ABLATIONS
from tidal.core.metrics import request_latencies
from tidal.sim.config import load_config
from tidal.sim.run import run_simulation

MODELS = ["llama-2-7b", "llama-2-7b", "llama-2-13b", "llama-2-70b"]
TRACES = {
    "conv": "azure_llm_2023/AzureLLMInferenceTrace_conv.csv.gz",
    "code": "azure_llm_2023/AzureLLMInferenceTrace_code.csv.gz",
}
SLO_TTFT = {"llama-2-7b": 2.0, "llama-2-13b": 2.0, "llama-2-70b": 5.0}
SLO_TPOT = 0.1


def cfg(
    placement,
    trace="conv",
    rate=1.0,
    alpha=1.0,
    disable=(),
    muxcap="batch",
    checkpoints="dram",
    eager=False,
    **mix,
):
    return load_config(
        {
            "workload": {"trace": TRACES.get(trace, trace)},
            "cluster": {
                "spec": "2x8:h100",
                "perf_model": PINNED_PERF_MODEL,
                "models": MODELS,
                "placement": placement,
                "eager_overhead": eager,
                "warmserve": {"disable": list(disable), "checkpoints": checkpoints},
                "serverlessllm": {"checkpoints": checkpoints},
                "muxserve": {"cap": muxcap},
                "mix": {"rate": rate, "alpha": alpha, **mix},
            },
        }
    )


def mux_layout(res):
    """MuxServe's meshes: ``size:model@MPS share/router cap`` per engine."""
    pol = res.extras["controller"].policy
    return "; ".join(
        f"{len(gpus)}:"
        + ",".join(f"{e.model.name.replace('llama-2-', '')}@{e.share:.0%}/{e.cap}" for e in engines)
        for gpus, engines in pol.layout
    )


def p99_per_model(res):
    return {k: v["ttft_p99_s"] for k, v in res.extras["summary"]["per_model"].items()}


def slo_attainment(res):
    """Share of all requests with TTFT ≤ the model's SLO (2 s; 5 s for 70B) and TPOT ≤ 0.1 s."""
    cols = res.columns
    lat = request_latencies(cols)
    names = res.extras["summary"]["models"]
    thr = np.array([SLO_TTFT[n.split("#")[0]] for n in names])[cols["model"]]
    ok = (lat["ttft_s"] <= thr) & (np.nan_to_num(lat["tpot_s"], nan=0.0) <= SLO_TPOT)
    return float(ok.mean())


def fmt(x):
    return "—" if x is None else f"{x:.3g}"


def ttft(args):
    print("| trace | rate | α | model | ServerlessLLM P99 TTFT s | WarmServe P99 TTFT s | ratio |")
    print("|---|---|---|---|---|---|---|")
    best = (0.0, "")
    ratios: dict[str, list[float]] = {}
    for trace in args.traces:
        for rate in args.rates:
            for alpha in args.alphas:
                ck = args.checkpoints
                sl = p99_per_model(
                    run_simulation(cfg("serverlessllm", trace, rate, alpha, checkpoints=ck))
                )
                ws = p99_per_model(
                    run_simulation(cfg("warmserve", trace, rate, alpha, checkpoints=ck))
                )
                for name in sl:
                    r = sl[name] / ws[name] if ws[name] else float("nan")
                    ratios.setdefault(name, []).append(r)
                    if r > best[0]:
                        best = (r, f"{trace} rate {rate} α {alpha} {name}")
                    print(
                        f"| {trace} | {rate:g} | {alpha:g} | {name} | {fmt(sl[name])} | "
                        f"{fmt(ws[name])} | {r:.1f}× |"
                    )
                sys.stdout.flush()
    every = [r for rs in ratios.values() for r in rs]
    per = ", ".join(f"{k} {np.median(v):.1f}×" for k, v in ratios.items())
    print(
        f"\nover {len(every)} cells: median ratio {np.median(every):.1f}× (per model: {per}), "
        f"smallest {min(every):.1f}×, largest {best[0]:.1f}× ({best[1]})"
    )


def capacity(args):
    """Highest rate each system sustains within the SLO. MuxServe is swept once per router cap
    in ``--caps`` (``batch``: B = 32, the default; ``kv``: MuxServe's own KV-bound batch;
    ``plan``: the placement's batch size, literally)."""
    print(
        "| trace | α | system | rate → SLO attainment (≥ 90% sustains) | highest rate | "
        "MuxServe layout at the highest rate |"
    )
    print("|---|---|---|---|---|---|")
    for trace in args.traces:
        for alpha in args.alphas:
            highest = {}
            systems = [("muxserve", cap) for cap in args.caps] + [("warmserve", "batch")]
            for system, cap in systems:
                cells, top, layout = [], 0.0, ""
                for rate in args.rates:
                    res = run_simulation(
                        cfg(system, trace, rate, alpha, muxcap=cap, eager=args.eager)
                    )
                    att = slo_attainment(res)
                    cells.append(f"{rate:g}: {att:.0%}")
                    if att >= 0.9:
                        top = rate
                        if system == "muxserve":
                            layout = mux_layout(res)
                    else:
                        break
                name = f"muxserve ({cap})" if system == "muxserve" else system
                highest[name] = top
                print(f"| {trace} | {alpha:g} | {name} | {', '.join(cells)} | {top:g} | {layout} |")
                sys.stdout.flush()
            for cap in args.caps:
                mx = highest[f"muxserve ({cap})"]
                ratio = f"{highest['warmserve'] / mx:.2f}×" if mx else "∞ (MuxServe sustains none)"
                print(f"| | | ratio vs muxserve ({cap}) | | {ratio} | |")


def compare(args):
    """All four placements at one rate and α, per trace."""
    print(
        "| trace | placement | P50 TTFT s | P99 TTFT s | P99 TTFT per model s | P99 TPOT s | "
        "instance starts | cold starts | hit rate | GPU-s | SLO attainment |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for trace in args.traces:
        for placement in ("dedicated", "serverlessllm", "muxserve", "warmserve"):
            res = run_simulation(cfg(placement, trace, args.rate, args.alpha))
            m = res.metrics
            per = " / ".join(fmt(v) for v in p99_per_model(res).values())
            hit = m["prewarm_hit_rate"]
            print(
                f"| {trace} | {placement} | {fmt(m['ttft_p50_s'])} | {fmt(m['ttft_p99_s'])} | "
                f"{per} | {fmt(m['tpot_p99_s'])} | {m['instance_starts']} | {m['cold_starts']} | "
                f"{'—' if hit is None else f'{hit:.0%}'} | {m['gpu_seconds']:,.0f} | "
                f"{slo_attainment(res):.1%} |"
            )
            sys.stdout.flush()


def ablation(args):
    names = {
        "a": "vanilla autoscaling",
        "b": "device+engine prewarm",
        "c": "unified memory, no forecast",
        "d": "no KV reservation",
        "e": "round-robin placement",
        "f": "full WarmServe",
    }
    print(f"Setting: {args.trace}, rate {args.rate:g}, α {args.alpha:g}\n")
    print(
        "| config | P99 TTFT all s | P99 TTFT per model s | hit rate | cold starts | "
        "GPU-s | replicas loaded/evicted |"
    )
    print("|---|---|---|---|---|---|---|")
    for key in "abcdef":
        res = run_simulation(cfg("warmserve", args.trace, args.rate, args.alpha, ABLATIONS[key]))
        m = res.metrics
        per = " / ".join(fmt(v) for v in p99_per_model(res).values())
        hit = m["prewarm_hit_rate"]
        print(
            f"| ({key}) {names[key]} | {fmt(m['ttft_p99_s'])} | {per} | "
            f"{'—' if hit is None else f'{hit:.0%}'} | {m['cold_starts']} | "
            f"{m['gpu_seconds']:,.0f} | {m['replicas_loaded']}/{m['replicas_evicted']} |"
        )
        sys.stdout.flush()


def long(args):
    c = load_config(
        {
            "workload": {"trace": "servegen/servegen_aggregate_rate_10min.csv.gz"},
            "cluster": {
                "spec": "2x8:h100",
                "perf_model": PINNED_PERF_MODEL,
                "models": MODELS,
                "placement": args.placement,
                "mix": {
                    "kind": "servegen",
                    "days": args.days,
                    "rate": args.rate,
                    "alpha": args.alpha,
                },
            },
        }
    )
    t = time.perf_counter()
    res = run_simulation(c)
    wall = time.perf_counter() - t
    m = res.metrics
    print(
        f"{args.placement}: {args.days:g} days, {m['num_requests']:,} requests, "
        f"wall {wall:.0f} s ({res.run_info['num_events']:,} events); "
        f"P99 TTFT {fmt(m['ttft_p99_s'])} s, "
        f"hit rate {fmt(m['prewarm_hit_rate'])}, cold starts {m['cold_starts']}, "
        f"GPU-s {m['gpu_seconds']:,.0f}"
    )
    for k, v in res.extras["summary"]["per_model"].items():
        print(
            f"  {k}: {v['num_requests']:,} req, P50/P99 TTFT {fmt(v['ttft_p50_s'])}/"
            f"{fmt(v['ttft_p99_s'])} s, starts {v['instance_starts']}, cold {v['cold_starts']}"
        )


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["ttft", "capacity", "compare", "ablation", "long"])
    ap.add_argument("--rates", type=float, nargs="+", default=[0.5, 1, 2, 4])
    ap.add_argument("--alphas", type=float, nargs="+", default=[0.5, 1, 2])
    ap.add_argument("--trace", default="conv")
    ap.add_argument("--rate", type=float, default=2.0)
    ap.add_argument("--alpha", type=float, default=1.0)
    ap.add_argument("--days", type=float, default=14)
    ap.add_argument("--placement", default="warmserve")
    ap.add_argument("--traces", nargs="+", default=["conv", "code"])
    ap.add_argument("--checkpoints", default="dram", choices=["dram", "ssd"])
    ap.add_argument("--eager", action="store_true", help="add the eager-mode step overhead")
    ap.add_argument("--caps", nargs="+", default=["batch"], choices=["batch", "kv", "plan"])
    args = ap.parse_args()
    commands = {"ttft": ttft, "capacity": capacity, "compare": compare, "ablation": ablation}
    commands["long"] = long
    commands[args.what](args)


if __name__ == "__main__":
    main()
