"""Golden hashes of whole cluster runs: every per-request column, the cluster and per-model
metrics and the result tables (GPU memory log, instances) of a small workload per placement.

The hashes were recorded from the code before issue 19's optimisations (skipped control ticks,
per-model fast-forward horizons, vectorised helpers, dropped stopped instances), re-recorded
from main's code whenever main changed results (KV plan, prefix cache; issue 13's monotone
measured curves, vLLM-v1 host term and GEMM tiles, then its all-reduce size regimes —
llama-2-13b at TP 2 runs the corrected roofline —, which move the ``auto`` step times these
cases use; with ``perf_model: roofline`` every digest is unchanged); each optimisation must
leave every one of them unchanged. A change of *behaviour* (a policy fix, a new metric)
changes them on purpose (issue 18: WarmServe's router queue, round-robin and peak-held
scale-down moved the six WarmServe digests other than ``warmserve-augmented``;
``warmserve-artifact-router`` turns both off and keeps the old ``warmserve`` digest; its
starvation guard moved ``warmserve-small-batch`` and ``warmserve-ssd-ablation-a``, the cases
where it hands an instance back — with ``starve_wait_s: 0`` both keep their old digests):
re-record with ``python -m tests.cluster.test_exact_hash`` and say why in the commit.
Issue 28 made the engine tables ``auto``'s second choice; the cases pin the step model they
were recorded with (``perf_model: auto-vidur``, the earlier ``auto``), so no digest moved.
Session 30: an augmented request's TPOT leaves out its tool calls (``core/metrics.py``; the old
value is ``tpot_incl_pauses_*``), which moved ``warmserve-augmented`` only: its columns hash
the same, its ``tpot_*``, ``goodput`` and ``slo_attainment`` (cluster and per model) changed
and ``tpot_incl_pauses_*`` was added (docs/design/augmented_tpot.md).
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
PINNED = "auto-vidur"
"""The step model of the recorded digests (``auto`` before issue 28)."""


def _azure(placement: str, **cluster: Any) -> dict[str, Any]:
    c = {
        "spec": "1x4:h100",
        "perf_model": PINNED,
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
        "perf_model": PINNED,
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
    "warmserve-artifact-router": _azure(
        "warmserve", warmserve={"router_queue": False, "peak_keep_s": 0}
    ),
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
    "dedicated": "15fa58110da11af31e264dd52582fd9f0818f16c5be5b61727ce87059b317d7d",
    "muxserve": "c1454ed145d06a5d752743520b03dd693a323b9b6fa7d535a1f1f0835f6d057c",
    "muxserve-servegen": "6426bcf7d8d32a7232811b892b5c22e562f8305043701f3f042c214934880036",
    "serverlessllm": "de828daa8b50fc748f65c63c790117c76d50dde8fe461ba615ce52271a71fc1c",
    "serverlessllm-servegen": "deca79f11c8eed1bc7d06503266434ee97c55c635e6ba05b0f16dec03f630cf9",
    "warmserve": "fc189db0c18f45e3fc16fc0acbb94c221fd5837654cb17c6d944570f3ccf3593",
    "warmserve-artifact-router": "10f235b9ce9711d4e5e254348747f06bdae87c087e143b3e600a130c4d9624ea",
    "warmserve-augmented": "22f4b94e1912a533ef5ed629bf251fb727a847fff8c586ed16762e4a98c736fd",
    "warmserve-ebplus": "a2d558b616c883212bd9a1651e096ec5b09b575c747f063a42e0df453c701da2",
    "warmserve-round-robin": "24469b7ae2a2e5ff3d2e07b95ff032bb429735dc536ad6d59d6438d31a580af1",
    "warmserve-servegen": "e3a9d12ae95a48c4a9131b95e0f96e66a6492e962c141658997367e17075b704",
    "warmserve-small-batch": "8381a81e450046d77c389088ebb9a9fb79716361039fefe96e7a139e4aa022ec",
    "warmserve-ssd-ablation-a": "07d97c7d669493ac46ce25c768e5dd52b53c6bec96b543a04b6b0c0231e36b1b",
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
