"""The simulator against a run measured elsewhere (``tidal fidelity --measured DIR``).

``DIR`` holds a measured run (``tidal bench serve --result-dir DIR`` against vLLM, SGLang or
``tidal serve``), or is a benchmark client's result file (``vllm bench serve --save-detailed``
JSON, aiperf's ``profile_export.jsonl``, guidellm's ``benchmarks.json``:
:mod:`tidal.workload.client_results`). Its completed requests are replayed in the simulator
with their own send times and lengths (:mod:`tidal.workload.measured`), on the GPU and
scheduler settings given (or a calibrated ``--profile``), and compared request by request with
the same statistics as the real-engine fidelity (:mod:`tidal.experiments.fidelity_metrics`).
Client-side times include the HTTP and streaming path, which the simulator does not model: on a
fast server that is part of the error.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tidal.core.errors import ConfigError
from tidal.core.io import write_json, write_parquet
from tidal.experiments.fidelity_metrics import fidelity_summary
from tidal.experiments.results import _clean
from tidal.sim.config import load_config
from tidal.sim.run import load_requests, run_simulation
from tidal.workload.measured import measured_columns


def measured_requests_path(measured: Path) -> Path:
    p = Path(measured)
    path = p / "requests.parquet" if p.is_dir() else p
    if not path.is_file():
        raise ConfigError(
            "measured",
            f"{path} does not exist",
            "give the --result-dir of `tidal bench serve`, or a vllm/aiperf/guidellm result file",
        )
    return path


def run_measured_fidelity(
    measured: Path,
    out: Path,
    *,
    model: str,
    gpu: str | None,
    tp: int | None,
    profile: Path | None,
    token_budget: int,
    max_seqs: int,
    batching: str,
    num_kv_blocks: int | None,
    block_size: int,
    gpu_memory_utilization: float | None,
    seed: int,
) -> dict[str, Any]:
    path = measured_requests_path(measured)
    memory: dict[str, Any] = {"block_size": block_size}
    if num_kv_blocks is not None:
        memory["num_blocks"] = num_kv_blocks
    if gpu_memory_utilization is not None:
        memory["gpu_memory_utilization"] = gpu_memory_utilization
    data: dict[str, Any] = {
        "model": model,
        "memory": memory,
        "scheduler": {"token_budget": token_budget, "max_seqs": max_seqs, "batching": batching},
        "workload": {"trace": str(path), "trace_format": "measured"},
        "seed": seed,
    }
    if gpu is not None:
        data["gpu"] = gpu
    if tp is not None:
        data["tp"] = tp
    if profile is not None:
        data["perf_model"] = f"profile:{profile}"
    cfg = load_config(data)
    reqs = load_requests(cfg)
    sim = run_simulation(cfg, reqs)
    real = measured_columns(path)
    result: dict[str, Any] = fidelity_summary(real, sim.columns)
    summary_path = path.parent / "summary.json"  # a tidal bench serve run's, beside its parquet
    own = path.suffix == ".parquet" and summary_path.exists()
    measured_summary = json.loads(summary_path.read_text()) if own else {}
    result.update(
        {
            "measured": str(path),
            "num_replayed": len(reqs),
            "real_metrics": [measured_summary.get("metrics", {})],
            "measured_config": measured_summary.get("config", {}),
            "sim_metrics": sim.metrics,
            "sim_config": cfg.model_dump(mode="json"),
            "seed": seed,
        }
    )
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "fidelity.json", _clean(result))
    write_parquet(out / "sim_requests.parquet", sim.columns)
    return result
