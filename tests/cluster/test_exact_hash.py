"""Golden hashes of whole cluster runs: every per-request column, the cluster and per-model
metrics and the result tables (GPU memory log, instances) of a small workload per placement.

The hashes were recorded from the code before issue 19's optimisations (skipped control ticks,
per-model fast-forward horizons, vectorised helpers, dropped stopped instances), re-recorded
from main's code whenever main changed results (KV plan, prefix cache); each optimisation
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
    "dedicated": "9e1433ad5b958133310b88817b51466d21828bddcb2439908b65602692f7aee4",
    "muxserve": "88c4d33406cf5fd512710bbe9aba040845a13b1b8a82bc71c75ac753abf0375f",
    "muxserve-servegen": "b3ee14f080a637fc17c821c9d1633d531089fb5b90da9c5b224e66529ca4a68c",
    "serverlessllm": "4daf1ba337e8aee7ad15f59171e6f56cf1f8e6be7c9ab9fda9ab5b4bae4d4951",
    "serverlessllm-servegen": "43a0a09aa5355ac6a2d423b2a448581e3c62edeee5a77e16aa1d80660ee65ff5",
    "warmserve": "03d608472460eb3f4b348662eb0d0fb62ce9ebfb6383ef3ac7118c7fc3a0a032",
    "warmserve-augmented": "d0e011a7b9ea33402ca5547c8ac26a2ea3c20b37173ca2a1c95d2c79462171f1",
    "warmserve-ebplus": "3d2ce0adf6f1a541701692cb62aab0b24e88186e00fff81dd19807af9ec19b34",
    "warmserve-round-robin": "77790ae917cb6b46a8620909249e07bf058c47ba4e82ae61f851fa265261d00f",
    "warmserve-servegen": "e29bb3360b928dfcc14c98f6f412759788ee0c45b61ec9aa5c5d1b401a6100b1",
    "warmserve-small-batch": "e964feb620b8bca615aa8ea343864b5ecd586843fa0a68263e0a50c753c7dcfb",
    "warmserve-ssd-ablation-a": "5ca55641b1f4f0e5a98e6ff37e9dac1acd695065164f99ee3fe6e3cf700b442d",
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
