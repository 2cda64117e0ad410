"""Golden hashes of whole cluster runs: every per-request column, the cluster and per-model
metrics and the result tables (GPU memory log, instances) of a small workload per placement.

The hashes were recorded from the code before issue 19's optimisations (skipped control ticks,
per-model fast-forward horizons, vectorised helpers, dropped stopped instances), re-recorded
from main's code whenever main changed results (KV plan, prefix cache; issue 13's monotone
measured curves, vLLM-v1 host term and GEMM tiles, which move the ``auto`` step times these
cases use — with ``perf_model: roofline`` every digest is unchanged); each optimisation
must leave every one of them unchanged. A change of *behaviour* (a policy fix, a new metric)
changes them on purpose: re-record with ``python -m tests.cluster.test_exact_hash`` and say
why in the commit.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import needs_traces
from tidal.cluster.config import ABLATIONS
from tidal.report.digest import result_digest
from tidal.sim.config import load_config
from tidal.sim.run import run_simulation

pytestmark = needs_traces

AZURE = "azure_llm_2023/AzureLLMInferenceTrace_code.csv.gz"
SERVEGEN = "servegen/servegen_aggregate_rate_10min.csv.gz"
SMALL = ["llama-2-7b", "llama-2-7b", "llama-2-13b"]
FOUR = ["llama-2-7b", "llama-2-7b", "llama-2-13b", "llama-2-70b"]


def _azure(placement: str, **cluster: Any) -> dict[str, Any]:
    c = {
        "spec": "1x4:h100",
        "models": SMALL,
        "placement": placement,
        "warmup_s": 20,
        "mix": {"rate": 3.0, "alpha": 1.0, "replay_s": 240},
    }
    c.update(cluster)
    return {"workload": {"trace": AZURE}, "cluster": c}


def _servegen(placement: str, days: float = 0.04, rate: float = 2.0, **cluster: Any):
    c = {
        "spec": "2x8:h100",
        "models": FOUR,
        "placement": placement,
        "mix": {"kind": "servegen", "rate": rate, "alpha": 1.0, "days": days},
    }
    c.update(cluster)
    return {"workload": {"trace": SERVEGEN}, "cluster": c}


CASES: dict[str, dict[str, Any]] = {
    "dedicated": _azure("dedicated"),
    "serverlessllm": _azure("serverlessllm"),
    "muxserve": _azure("muxserve"),
    "warmserve": _azure("warmserve"),
    "warmserve-small-batch": _azure("warmserve", batch=4),
    "warmserve-round-robin": _azure("warmserve", warmserve={"disable": ["placement"]}),
    "warmserve-servegen": _servegen("warmserve"),
    "serverlessllm-servegen": _servegen("serverlessllm", days=0.02),
    "muxserve-servegen": _servegen("muxserve", days=0.02),
    "warmserve-ebplus": {**_azure("warmserve"), "scheduler": {"batching": "ebplus"}},
    "warmserve-ssd-ablation-a": _azure(
        "warmserve", batch=8, warmserve={"checkpoints": "ssd", "disable": list(ABLATIONS["a"])}
    ),
    "warmserve-augmented": _azure(
        "warmserve", mix={"rate": 2.0, "alpha": 1.0, "replay_s": 120, "augmented": "infercept-mix"}
    ),
}

GOLDEN: dict[str, str] = {
    "dedicated": "35373021cfde28785a55486f5b191c0e7a1dce047b07a542ecd2915042e33540",
    "muxserve": "a89822b757b0874a1f876a64ff537f2128d40fb8d520e3ab5fedbd0bca741943",
    "muxserve-servegen": "58520c5494e25133a8882ca5aea984df645b4b4bb26d83c11a6f98c8ee4fa2a3",
    "serverlessllm": "2e0ff7ff9466e721531184d122cd584184c2d4eca41e081024aeef57626024e1",
    "serverlessllm-servegen": "e7dd075a1839f3489937f56b286755c39e327c11a7ae4d5d41b82c4cf779f90d",
    "warmserve": "3ec4e8a894c8b1dd30e3bef2b0a5d192c846dd117095a96ab5de79f62ec9c463",
    "warmserve-augmented": "8dc1de15f169bbf959a99020037fb42945a51bba26fd3e64bccd5ecca320b909",
    "warmserve-ebplus": "a2fd7123312e52862411a22fa2faa62d11b814b7d48f673b500953f8f179b857",
    "warmserve-round-robin": "37adc237e1a5264f3fa9b039ca35e417cda918d3cde4e04808c0084f3bec619b",
    "warmserve-servegen": "af7f1a3bc05dd14d784c93e3dd30d1f2282254fe4c8bf848fa42b708f78768f6",
    "warmserve-small-batch": "0f1b413444a12a0f29991cafc3a18c52d5859e0fd5e6f2be7a17e8fcda7c620c",
    "warmserve-ssd-ablation-a": "b0145f786113be7a87fda296160370bdf723b9162669f3d77c6c8ae9bfa4b197",
}


def run_digest(cfg: dict[str, Any]) -> str:
    """The run's columns, metrics (cluster and per model) and tables, hashed."""
    return result_digest(run_simulation(load_config(cfg)))


@pytest.mark.parametrize("case", sorted(CASES))
def test_cluster_run_matches_its_golden_hash(case):
    assert run_digest(CASES[case]) == GOLDEN[case]


if __name__ == "__main__":
    for name in sorted(CASES):
        print(f'    "{name}": "{run_digest(CASES[name])}",')
