"""Speculation in the controller's load estimates (cluster/spec_capacity.py): a dedicated
1×8 H100 cluster of Llama-2-7B and Llama-2-13B on the Azure code trace, the 7B with n-gram
speculation (k = 3, α = 0.7) or none. Per run: the dedicated placement's demand estimate
(mean in-flight requests per model), the measured mean in-flight (Σ (finish − arrival) / span),
the instances it placed, and per model TTFT p99, TPOT p99 and SLO attainment (TTFT 0.5 s,
TPOT 15 ms). Run it under the code before and after the change to compare sizings.

    nice python bench/cluster_spec_capacity.py --rates 4,8
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from tidal.sim.config import load_config
from tidal.sim.run import run_simulation

AZURE = "azure_llm_2023/AzureLLMInferenceTrace_code.csv.gz"
NGRAM = {"method": "ngram", "num_speculative_tokens": 3, "acceptance_rate": 0.7}


def run(rate: float, spec: bool, replay_s: float) -> dict:
    t0 = time.perf_counter()
    res = run_simulation(load_config({
        "workload": {"trace": AZURE}, "slo": {"ttft_s": 0.5, "tpot_s": 0.015},
        "cluster": {"spec": "1x8:h100", "models": ["llama-2-7b", "llama-2-13b"],
                    "placement": "dedicated", "warmup_s": 60,
                    "mix": {"rate": rate, "alpha": 1.0, "replay_s": replay_s},
                    "speculative": {"llama-2-7b": NGRAM} if spec else {}},
    }))  # fmt: skip
    ctl, c = res.extras["controller"], res.columns
    a, f, m = (np.asarray(c[k]) for k in ("arrival_ns", "finish_ns", "model"))
    span = (a.max() - a.min()) / 1e9
    out = {
        "rate": rate, "spec_7b": spec,
        "instances": np.bincount(np.asarray(ctl.instance_table()["model"])).tolist(),
        "demand": [round(d, 3) for d in ctl.demand],
        "measured_inflight": [round(float((f - a)[m == i].sum()) / 1e9 / span, 3)
                              for i in range(2)],
    }  # fmt: skip
    for name, pm in res.extras["summary"]["per_model"].items():
        out[name] = {k: pm.get(k) for k in ("ttft_p99_s", "tpot_p99_s", "slo_attainment")}
    out["cluster_slo_attainment"] = res.metrics["slo_attainment"]
    out["wall_s"] = round(time.perf_counter() - t0, 1)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rates", default="4,8")
    ap.add_argument("--replay-s", type=float, default=300.0)
    args = ap.parse_args()
    for rate in (float(r) for r in args.rates.split(",")):
        for spec in (False, True):
            print(json.dumps(run(rate, spec, args.replay_s)))


if __name__ == "__main__":
    main()
