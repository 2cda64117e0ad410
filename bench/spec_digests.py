"""Output digests of seeded speculative (and plain) runs, for before/after comparisons of
changes that must not move a byte (docs/design/spec-sim-speed.md).

Each line: case, fast-forward on/off, the sha256 (first 20 hex digits) of the metrics and
every per-request column, and a few counters. Run on two checkouts and diff the outputs:

    TIDAL_TRACES_DIR=<traces dir> python bench/spec_digests.py > after.txt

Cases: plain; eagle3 k=3; eagle3 k=5 α=0.6; ngram k=4 α=0.7 on the roofline (the affine
path); mtp k=2 α=[0.85, 0.6] on ``measured`` A100; eagle3 under KV pressure at block size 24
(floor division) and at block size 16 with every request at once (preemptions); a draft
model; each with fast-forward on and off, plus eagle3 k=3 at 10,000 requests.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import numpy as np

from tidal.sim.config import SimulationConfig
from tidal.sim.run import run_simulation


def cfg(
    n: int, rate: float, ff: bool, perf: str = "auto", model: str = "llama-3.1-8b",
    gpu: str = "h100", spec: dict[str, Any] | None = None, mem: dict[str, Any] | None = None,
    seed: int = 1,
) -> SimulationConfig:  # fmt: skip
    d: dict[str, Any] = {
        "model": model, "gpu": gpu, "tp": 1, "perf_model": perf, "fast_forward": ff,
        "seed": seed,
        "workload": {"num_requests": n, "rate": rate, "length_dist": "empirical:sharegpt"},
    }  # fmt: skip
    if spec:
        d["speculative"] = spec
    if mem:
        d["memory"] = mem
    return SimulationConfig.model_validate(d)


E3 = {"method": "eagle3", "num_speculative_tokens": 3}
E5 = {"method": "eagle3", "num_speculative_tokens": 5, "acceptance_rate": 0.6}
NG = {"method": "ngram", "num_speculative_tokens": 4, "acceptance_rate": 0.7}
MTP = {"method": "mtp", "num_speculative_tokens": 2, "acceptance_rate": [0.85, 0.6]}
DM = {"method": "draft_model", "num_speculative_tokens": 4, "acceptance_rate": 0.75,
      "model": "tiny-llama"}  # fmt: skip


TIGHT_BS24 = {"num_blocks": 900, "block_size": 24}


def cases() -> list[tuple[str, SimulationConfig]]:
    out = []
    for ff in (True, False):
        out += [
            ("plain", cfg(3000, 6.57, ff)),
            ("e3", cfg(3000, 6.57, ff, spec=E3)),
            ("e5", cfg(3000, 8.0, ff, spec=E5, seed=7)),
            ("ng_roof", cfg(3000, 6.0, ff, perf="roofline", spec=NG, seed=3)),
            ("mtp_meas", cfg(2000, 5.0, ff, "measured", "llama-3-8b", "a100-80gb", MTP, seed=5)),
            ("e3_kvtight_bs24", cfg(1500, 40.0, ff, spec=E3, mem=TIGHT_BS24, seed=11)),
            ("e5_kvtight", cfg(1500, 1e9, ff, spec=E5, mem={"num_blocks": 1500}, seed=2)),
            ("dm", cfg(2000, 6.0, ff, spec=DM, seed=9)),
        ]
    out.append(("e3_10k", cfg(10000, 6.57, True, spec=E3)))
    return out


def main() -> None:
    for name, c in cases():
        r = run_simulation(c)
        h = hashlib.sha256(json.dumps(r.metrics, sort_keys=True, default=str).encode())
        for k in sorted(r.columns):
            h.update(k.encode())
            h.update(np.ascontiguousarray(np.asarray(r.columns[k])).tobytes())
        keys = ("num_preemptions", "spec_decode_num_drafts", "num_steps")
        extra = {k: r.metrics[k] for k in keys if k in r.metrics}
        print(f"{name}_ff{c.fast_forward}", (h.hexdigest()[:20], extra))


if __name__ == "__main__":
    main()
