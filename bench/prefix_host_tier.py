"""The prefix cache's host-memory tier (vLLM's CPU KV offload) on the Mooncake traces
(issue 14): hit rate (GPU + host), TTFT and load time with one H100's GPU cache and 0 / 64 /
256 GiB of host tier, Llama-3.1-8B, vLLM defaults, the traces at ``--rate-scale``.

    python bench/prefix_host_tier.py [--rate-scale 0.25] [--gib 0,64,256]
"""

from __future__ import annotations

import argparse
import os

from _common import md_table, save
from prefix_cache import TRACES, config

from tidal.sim.run import load_requests, run_simulation


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rate-scale", type=float, default=0.25)
    ap.add_argument("--gib", default="0,64,256")
    args = ap.parse_args()
    sizes = [float(g) for g in args.gib.split(",")]
    rows, data = [], {"load": os.getloadavg(), "rate_scale": args.rate_scale}
    for name in TRACES:
        reqs = None
        for gib in sizes:
            cfg = config(name, args.rate_scale, host_cache_gib=gib)
            reqs = reqs if reqs is not None else load_requests(cfg)
            m = run_simulation(cfg, reqs).metrics
            keep = ("prefix_cache_hit_rate", "ttft_p50_s", "ttft_p90_s", "ttft_mean_s")
            data[f"{name}/{gib:g}"] = {k: v for k, v in m.items() if k in keep or "host" in k}
            rows.append(
                [
                    name,
                    f"{gib:g}",
                    f"{m['prefix_cache_hit_rate']:.3f}",
                    f"{m.get('prefix_cache_host_hit_rate', 0.0):.3f}",
                    f"{m.get('prefix_cache_host_load_s', 0.0):.1f}",
                    f"{m['ttft_p50_s']:.2f}",
                    f"{m['ttft_p90_s']:.2f}",
                    f"{m['ttft_mean_s']:.2f}",
                ]
            )
    header = ["trace", "host GiB", "hit rate", "of it host", "load s", "TTFT p50", "p90", "mean"]
    print(md_table(header, rows))
    print(f"load average at the end: {os.getloadavg()}")
    save("prefix_host_tier", data)


if __name__ == "__main__":
    main()
