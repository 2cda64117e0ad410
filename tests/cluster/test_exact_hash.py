"""Golden hashes of whole cluster runs: every per-request column, the cluster and per-model
metrics and the result tables (GPU memory log, instances) of a small workload per placement.

The hashes were recorded from the code before the control and fast-forward optimisations of
issue 19 (sleeping control ticks, per-model fast-forward horizons, vectorised helpers, dropped
retired instances); each optimisation must leave every one of them unchanged. A change of
*behaviour* (a policy fix, a new metric) changes them on purpose: re-record with
``python -m tests.cluster.test_exact_hash`` and say why in the commit.
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
    "dedicated": "61922d070b7f4b0480c5ba8fb545643e2079dc9a8f884d3b5d7dd4311b5a7ec2",
    "muxserve": "8dd3516b0466f29b9c6e0d0ffaa204c1370a4e046b948e3b08c454391fb9403d",
    "muxserve-servegen": "316e806d63abb48e68efe8bd989341c74253fd54290984ce43e79757c288c7a0",
    "serverlessllm": "52ba5c571e98cab7464c1ba774cedf004dfc9409fc62b437c481e7d3d1ca7c3a",
    "serverlessllm-servegen": "49229e248df28eece5c3a08582cb4890a0cff2228def8ab8d3d0a61cccd930ea",
    "warmserve": "3a9faf51065c009d79d4096a2063ad161961a55bda0fc1e901362cf43fe0d493",
    "warmserve-augmented": "26a41c08a1a90f680680fd1d02366ec67790631daae0c9747a8284394890b423",
    "warmserve-ebplus": "c2c1c967c76b1fc440c2a8eb96ae464722c0ee1b52e71e606029104781f068d6",
    "warmserve-round-robin": "91189037cd3a000ad06908a723167f869d88b06ddd84276abc4762d81ac1fbfb",
    "warmserve-servegen": "38ea9da9bef9143cf2528b3fdfba7b6f8d907b1bc12e22c080c67e26b217ccd0",
    "warmserve-small-batch": "731afd24aad115d817a78f5493136352ad399406e8b1215bc585aabe32153235",
    "warmserve-ssd-ablation-a": "a1d83a93cb81442accc379829916e730b4cb6284301dd0fc6806adee02112fde",
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
