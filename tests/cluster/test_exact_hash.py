"""Golden hashes of whole cluster runs: every per-request column, the cluster and per-model
metrics and the result tables (GPU memory log, instances) of a small workload per placement.

The hashes were recorded from the code before issue 19's optimisations (skipped control ticks,
per-model fast-forward horizons, vectorised helpers, dropped stopped instances), re-recorded
from main's code whenever main changed results (KV plan, prefix cache; issue 13's monotone
measured curves, vLLM-v1 host term and GEMM tiles, then its all-reduce size regimes —
llama-2-13b at TP 2 runs the corrected roofline —, which move the ``auto`` step times these
cases use; with ``perf_model: roofline`` every digest is unchanged); each optimisation must
leave every one of them unchanged. A change of *behaviour* (a policy fix, a new metric)
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
    "dedicated": "e6fd0cdb0cfd82e61602ea866f51e587af8e10b16ee83ae0ad086f1a84347744",
    "muxserve": "ec326ce1d4f122e21f367a73e5f8264e70c423acb6b393e2c78c4f10984e7358",
    "muxserve-servegen": "b5af9787e28f6806a8dc20d04e36e7d10f00fa8dfec295f7d56aa5872bd386b6",
    "serverlessllm": "de05d012715c2c7b7adcdf971690b2776b83338fc203fdc04bb5d42ad7306b29",
    "serverlessllm-servegen": "389f2ad7b52dc2c2134f2cb3c02cbc42069498ebd557e85710c77c4c26a66d3c",
    "warmserve": "93e0c197e1e4c3d1dbad7825745a7d07a2c7d36a64aebba10fe89654fbb8542f",
    "warmserve-augmented": "0dcd75a2e8a5808d0ee644ae2fadca3c96baf2ad665db0b26f93ac71b355c8cf",
    "warmserve-ebplus": "4dbf8d068c4aef181f114a9faa51594cfd8a1aecada35c73fc0058e6ca75ca63",
    "warmserve-round-robin": "02a4f98b126a36c95476eccf6cc948cff3f73d68086823c06787ce4aca9408e7",
    "warmserve-servegen": "468b6a8eedb35e5e29e135b515723ebbf2e82b6e526ceaa97995d9dc14b84502",
    "warmserve-small-batch": "f270abc3aca55322b965f16ec2b9843d8c145bd2c15dcad127d11f213bed8fbc",
    "warmserve-ssd-ablation-a": "221bcbd5c99602a62ce10bce7c0c1525d8267d3678ef5631cf77fe105159f80f",
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
