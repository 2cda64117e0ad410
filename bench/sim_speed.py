"""Simulator speed: simulated requests per wall-second, fast-forward on vs off.

Setting (issue 2): Llama-3.1-8B on one H100, 10,000 requests with ShareGPT lengths, Poisson
arrivals at about 80% of the instance's capacity (capacity = saturated request throughput,
measured first). Reports the median of N repeats of the simulation phase alone (workload
generation excluded, identical for both modes) and the ratio.

    python bench/sim_speed.py [--requests 10000] [--repeats 5]
    python bench/sim_speed.py --perf-models roofline,measured,corrected-roofline \
        --model llama-3-8b --gpu a100-80gb [--tp 1]

The second form (issue 13) times fast-forwarded runs of one deployment under each step-time
model, each offered 80% of its own capacity, in one process; ratios are against the first.

    python bench/sim_speed.py --speculative-config '{"method":"eagle3","num_speculative_tokens":3}'

The third form (issue 29) times the first form's fast-forwarded run with and without
speculative decoding on the same requests at the same rate (80% of the plain capacity),
repeats interleaved (plain, spec, plain, spec …) so that load drift hits both alike; it
reports the medians, the ratio of simulated requests per wall-second (target ≥ 0.7), the CPU
time per simulated step and per request of each run, and the 1-minute load average before and
after.
"""

from __future__ import annotations

import argparse
import statistics

from _common import md_table, median_time, save

from tidal.sim.config import SimulationConfig
from tidal.sim.run import load_requests, run_simulation


def config(
    num: int, rate: float, ff: bool, perf: str = "auto", model: str = "llama-3.1-8b",
    gpu: str = "h100", tp: int = 1, speculative: str | None = None,
) -> SimulationConfig:  # fmt: skip
    return SimulationConfig.model_validate(
        {
            **({"speculative": speculative} if speculative else {}),
            "model": model,
            "gpu": gpu,
            "tp": tp,
            "perf_model": perf,
            "workload": {
                "num_requests": num,
                "rate": rate,
                "length_dist": "empirical:sharegpt",
            },
            "fast_forward": ff,
            "seed": 1,
        }
    )


def compare_perf_models(args: argparse.Namespace) -> None:
    """Repeats interleave the models (A B C A B C ...) so that load drift on a shared machine
    hits each alike; medians per model."""
    import time

    kinds = args.perf_models.split(",")
    dep = {"model": args.model, "gpu": args.gpu, "tp": args.tp}
    data: dict = {"requests": args.requests, **dep, "models": {}}
    runs = {}
    for kind in kinds:
        sat = run_simulation(config(4000, float("inf"), True, kind, **dep))
        rate = round(0.8 * sat.metrics["request_throughput"], 3)
        cfg = config(args.requests, rate, True, kind, **dep)
        runs[kind] = (rate, cfg, load_requests(cfg), [], [])
    res = {}
    for _ in range(args.repeats):
        for kind, (_rate, cfg, reqs, times, cpu) in runs.items():
            t0, c0 = time.perf_counter(), time.process_time()
            res[kind] = run_simulation(cfg, reqs)
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
    rows, base, base_cpu = [], None, None
    for kind, (rate, _cfg, _reqs, times, cpu) in runs.items():
        med, med_cpu = statistics.median(times), statistics.median(cpu)
        base, base_cpu = base or med, base_cpu or med_cpu
        m = res[kind].metrics
        data["models"][kind] = {
            "rate_req_s": rate, "median_wall_s": med, "wall_s": times,
            "median_cpu_s": med_cpu, "cpu_s": cpu, "speed_vs_first_cpu": base_cpu / med_cpu,
            "req_per_wall_s": args.requests / med, "speed_vs_first": base / med,
            "events": res[kind].run_info["num_events"], "steps": m["num_steps"],
            "source": m["perf_model_source"],
        }  # fmt: skip
        rows.append([kind, m["perf_model_source"], f"{rate}", f"{m['num_steps']:,}",
                     f"{med:.3f}", f"{med_cpu:.3f}", f"{args.requests / med:,.0f}",
                     f"{base / med:.2f}x", f"{base_cpu / med_cpu:.2f}x"])  # fmt: skip
    print(md_table(["perf model", "source", "offered req/s", "steps", "median wall s",
                    "median CPU s", "simulated req / wall s", "speed vs first (wall)",
                    "speed vs first (CPU)"], rows))  # fmt: skip
    save(f"sim_speed_perf_models_{args.model}_{args.gpu}_tp{args.tp}", data)


def compare_speculation(args: argparse.Namespace) -> None:
    """Plain vs speculative, fast-forward on, same requests and rate; interleaved repeats."""
    import os
    import time

    sat = run_simulation(config(4000, float("inf"), True))
    rate = round(0.8 * sat.metrics["request_throughput"], 3)
    runs = {
        "plain": config(args.requests, rate, True),
        "speculative": config(args.requests, rate, True, speculative=args.speculative_config),
    }
    reqs = load_requests(runs["plain"])
    times: dict[str, list[float]] = {k: [] for k in runs}
    cpu: dict[str, list[float]] = {k: [] for k in runs}
    res = {}
    load_before = os.getloadavg()
    for _ in range(args.repeats):
        for kind, cfg in runs.items():
            t0, c0 = time.perf_counter(), time.process_time()
            res[kind] = run_simulation(cfg, reqs)
            times[kind].append(time.perf_counter() - t0)
            cpu[kind].append(time.process_time() - c0)
    load_after = os.getloadavg()
    med = {k: statistics.median(v) for k, v in times.items()}
    ratio = med["plain"] / med["speculative"]
    med_cpu = {k: statistics.median(v) for k, v in cpu.items()}
    ratio_cpu = med_cpu["plain"] / med_cpu["speculative"]
    m = res["speculative"].metrics
    data = {
        "requests": args.requests, "rate_req_s": rate,
        "speculative_config": args.speculative_config,
        "load_avg_1m_before": load_before[0], "load_avg_1m_after": load_after[0],
        "ratio_spec_over_plain_req_per_s": ratio, "ratio_cpu": ratio_cpu,
        **{k: {"median_wall_s": med[k], "wall_s": times[k], "median_cpu_s": med_cpu[k],
               "cpu_s": cpu[k],
               "req_per_wall_s": args.requests / med[k],
               "steps": res[k].metrics["num_steps"], "events": res[k].run_info["num_events"],
               "cpu_us_per_step": med_cpu[k] / res[k].metrics["num_steps"] * 1e6,
               "cpu_us_per_request": med_cpu[k] / args.requests * 1e6,
               "tpot_p50_s": res[k].metrics["tpot_p50_s"]} for k in runs},
        "spec_decode_mean_acceptance_length": m["spec_decode_mean_acceptance_length"],
    }  # fmt: skip
    rows = [
        [k, f"{med[k]:.3f}", f"{med_cpu[k]:.3f}", f"{args.requests / med[k]:,.0f}",
         f"{res[k].metrics['num_steps']:,}",
         f"{res[k].run_info['num_events']:,}",
         f"{med_cpu[k] / res[k].metrics['num_steps'] * 1e6:.2f}",
         f"{med_cpu[k] / args.requests * 1e6:.1f}",
         f"{res[k].metrics['tpot_p50_s'] * 1e3:.2f}"]
        for k in runs
    ]  # fmt: skip
    print(f"offered {rate} req/s (80% of the plain capacity), {args.requests} requests")
    print(md_table(["run", "median wall s", "median CPU s", "simulated req / wall s", "steps",
                    "events", "CPU µs / step", "CPU µs / request",
                    "TPOT p50 ms"], rows))  # fmt: skip
    print(f"speculative / plain (simulated req per wall-s, medians): {ratio:.2f}x "
          f"(CPU time: {ratio_cpu:.2f}x); "
          f"load average 1 min {load_before[0]:.2f} → {load_after[0]:.2f}")  # fmt: skip
    save("sim_speed_speculative", data)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=10_000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--perf-models", default="")
    ap.add_argument("--model", default="llama-3-8b")
    ap.add_argument("--gpu", default="a100-80gb")
    ap.add_argument("--tp", type=int, default=1)
    ap.add_argument("--speculative-config", default="")
    args = ap.parse_args()
    if args.speculative_config:
        compare_speculation(args)
        return
    if args.perf_models:
        compare_perf_models(args)
        return

    sat = run_simulation(config(4000, float("inf"), True))
    capacity = sat.metrics["request_throughput"]
    rate = round(0.8 * capacity, 3)
    rows, data = [], {"capacity_req_s": capacity, "rate_req_s": rate, "requests": args.requests}
    ref = None
    for ff in (False, True):
        cfg = config(args.requests, rate, ff)
        reqs = load_requests(cfg)
        med, times, res = median_time(lambda c=cfg, r=reqs: run_simulation(c, r), args.repeats)
        sim_s = res.run_info["simulate_s"]
        key = "ff_on" if ff else "ff_off"
        data[key] = {
            "median_wall_s": med,
            "wall_s": times,
            "simulate_s_last": sim_s,
            "req_per_wall_s": args.requests / med,
            "events": res.run_info["num_events"],
            "ttft_p50_s": res.metrics["ttft_p50_s"],
            "e2e_p50_s": res.metrics["e2e_p50_s"],
        }
        if ref is None:
            ref = res.metrics
        else:
            assert res.metrics == ref, "fast-forward changed the metrics"
        rows.append(
            [key, f"{med:.3f}", f"{args.requests / med:,.0f}", f"{res.run_info['num_events']:,}"]
        )
    data["ratio_on_over_off"] = data["ff_off"]["median_wall_s"] / data["ff_on"]["median_wall_s"]
    print(f"capacity {capacity:.2f} req/s, offered {rate} req/s (80%)")
    print(md_table(["mode", "median wall s", "simulated req / wall s", "events"], rows))
    print(f"fast-forward speed-up (median wall off / on): {data['ratio_on_over_off']:.2f}x")
    print(f"metrics identical in both modes: TTFT p50 {ref['ttft_p50_s']:.3f} s")
    save("sim_speed", data)


if __name__ == "__main__":
    main()
