"""Golden hashes of whole cluster runs: every per-request column, the cluster and per-model
metrics and the result tables (GPU memory log, instances) of a small workload per placement.

The hashes were recorded from the code before issue 19's optimisations (skipped control ticks,
per-model fast-forward horizons, vectorised helpers, dropped stopped instances), re-recorded
from main's code when main changed the KV plan; each optimisation must leave every one of them
unchanged. A change of *behaviour* (a policy fix, a new metric) changes them on purpose:
re-record with ``python -m tests.cluster.test_exact_hash`` and say why in the commit.
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
    "dedicated": "da4146f41cefbc887561ffc3932d7ec55d8ace1268812eeaf777651b0a2fc7c1",
    "muxserve": "871c5b8009907441e24fb198fc6c2904b82b5954455b194fb5a9e62d750c1848",
    "muxserve-servegen": "eb22b4326c8a798f2b8e646ff0fdfc323d69eec453926a9f25458514c0a1988c",
    "serverlessllm": "21c6cd93346a9bcabb39b40a0feced113e724c2b6ed6aae4f619cddc42547555",
    "serverlessllm-servegen": "808858cf7f55f688b84283f75c5352884badb7d93f57461bbc681e0ecd31bd12",
    "warmserve": "a45e3e516dfc16295baf74fb3a2b6b7549aa773db5581037dbfe52e2f33f3816",
    "warmserve-augmented": "78f203acd6797ed168dc1fe325a91f82f64d3168e0c9336e0c56ba618a73c4c2",
    "warmserve-ebplus": "0e70383a5c87e3446868aad8884018773d8aa848c40f6502c917dfd998e6f1f2",
    "warmserve-round-robin": "b742933928b16f347abef61fec76cb42c5274cd0a31773ce014443fbc3d21fb7",
    "warmserve-servegen": "6179143240b7176f5ef8cc0eb906539b3c5166cb987b8c0c735639de10dd1e15",
    "warmserve-small-batch": "6a5791eb7c95781952ecb078fed673bb1deedd001a2ebda9a067531773351126",
    "warmserve-ssd-ablation-a": "538ac0bb0d3f816b86bdd2040b054b30b6f34697b01f6de4187a6c69a9003499",
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
