"""Simulator speed: simulated requests per wall-second, fast-forward on vs off.

Setting (issue 2): Llama-3.1-8B on one H100, 10,000 requests with ShareGPT lengths, Poisson
arrivals at about 80% of the instance's capacity (capacity = saturated request throughput,
measured first). Reports the median of N repeats of the simulation phase alone (workload
generation excluded, identical for both modes) and the ratio.

    python bench/sim_speed.py [--requests 10000] [--repeats 5]
"""

from __future__ import annotations

import argparse

from _common import md_table, median_time, save

from tidal.sim.config import SimulationConfig
from tidal.sim.run import load_requests, run_simulation


def config(num: int, rate: float, ff: bool) -> SimulationConfig:
    return SimulationConfig.model_validate(
        {
            "model": "llama-3.1-8b",
            "gpu": "h100",
            "workload": {
                "num_requests": num,
                "rate": rate,
                "length_dist": "empirical:sharegpt",
            },
            "fast_forward": ff,
            "seed": 1,
        }
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=10_000)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()

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
