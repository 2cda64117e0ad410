"""The robustness grid's cells and guarantees (issue 18), apart from how they are run.

Three families, each a set of *groups*: the cells of one group differ only in the policy, so a
group is one comparison of a paper's policy with its baselines.

* ``ebplus``: every catalog GPU × (dense small, dense large at TP > 1, the MoE) × five mixes
  (decode-heavy, balanced, prefill-heavy: uniform ±50 % around (μ_L, μ_O); ShareGPT and arXiv
  summarisation lengths) × closed-loop concurrency (light to past saturation), batching MB / EB
  / EB⁺, with the bandwidth-derived interference everywhere (``interference: true``).
  Guarantee: EB⁺ token throughput ≥ max(EB, MB) − 1 %, and preemptions per request no more than
  the smaller of EB's and MB's (+ 0.2 % of requests, see :data:`PREEMPT_SLACK`).
* ``augserve``: every catalog GPU × (GPT-J-6B, Llama-3.1-8B, Llama-2-13B, Llama-3.1-70B) on
  INFERCEPT's six-type tool-calling mixture at loads from a quarter of the deployment's
  capacity to 1.5× it, policies vLLM-style / INFERCEPT / AugServe. Guarantee: AugServe's
  effective throughput ≥ INFERCEPT's − 1 % and its P99 TTFT ≤ 1.1 × INFERCEPT's.
* ``warmserve``: clusters of 2 × 8 GPUs (H100, A100, H200) × two model sets × the two Azure
  services × a rate ladder, placements dedicated / ServerlessLLM / MuxServe / WarmServe.
  The ladder is 0.5, 1, 2, 4 req/s (every placement), then geometric by √2 up to 128 req/s
  (:data:`LADDER`), climbed per setting until both WarmServe and MuxServe have fallen below
  90 % SLO attainment; MuxServe is not run above a rung where it fell below, ServerlessLLM
  runs beside WarmServe for the TTFT guarantee, dedicated only at the first four rates
  (:func:`ladder_policies`).
  Guarantees: WarmServe's P99 TTFT ≤ ServerlessLLM's for every model of every cell, and its
  highest rate with SLO attainment ≥ 90 % ≥ MuxServe's, per (cluster, model set, service).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from _common import PINNED_PERF_MODEL

from tidal.core.errors import ConfigError
from tidal.hardware.gpus import get_gpu
from tidal.hardware.memory import plan_memory
from tidal.hardware.models import get_model

GPUS = ("h100", "h200", "a100-80gb", "l40s", "a40", "rtx-pro-6000", "b200")
"""The grid's GPUs: the catalog of issue 18 (issue 28's B300 / GB200 / GB300 are not in it, so
the recorded grid stays the same grid)."""

MIXES: dict[str, dict[str, Any]] = {
    "DH": {"prompt_len": 128, "output_len": 1024, "length_dist": "uniform"},
    "BAL": {"prompt_len": 512, "output_len": 512, "length_dist": "uniform"},
    "PH": {"prompt_len": 1024, "output_len": 128, "length_dist": "uniform"},
    "sharegpt": {
        "length_dist": "empirical:sharegpt",
        "max_prompt_len": 4096,
        "max_output_len": 2048,
    },
    "arxiv": {"length_dist": "empirical:arxiv", "max_prompt_len": 8192, "max_output_len": 1024},
}
"""Workload mixes of the EB⁺ family (the EB paper's three synthetic mixes and two real length
distributions of ``shared/traces/length_distributions``)."""

EB_MODELS = ("qwen3-8b", "llama-3.1-70b", "qwen3-30b-a3b")
AUG_MODELS = ("gpt-j-6b", "llama-3.1-8b", "llama-2-13b", "llama-3.1-70b")
CONCURRENCY = (1, 4, 16, 128, 512, 2048)
LOAD_FACTORS = (0.25, 0.5, 0.75, 0.9, 1.0, 1.25, 1.5)
"""Offered load of the tool-calling mixture as a multiple of the deployment's capacity."""

CLUSTER_SPECS = ("2x8:h100", "2x8:a100-80gb", "2x8:h200")
MODEL_SETS = {
    "llama2": ["llama-2-7b", "llama-2-7b", "llama-2-13b", "llama-2-70b"],
    "llama3": ["llama-3.1-8b", "llama-3.1-8b", "qwen3-8b", "llama-3.1-70b"],
}
CLUSTER_RATES = (0.5, 1.0, 2.0, 4.0)
LADDER = tuple(round(4.0 * 2 ** (k / 2), 2) for k in range(1, 11))
"""Rungs above :data:`CLUSTER_RATES`: 5.66, 8, 11.31, …, 90.51, 128 req/s (factor √2)."""
WARM_PLACEMENTS = ["warmserve", "serverlessllm", "muxserve", "dedicated"]
AZURE = {
    "conv": "azure_llm_2023/AzureLLMInferenceTrace_conv.csv.gz",
    "code": "azure_llm_2023/AzureLLMInferenceTrace_code.csv.gz",
}

TOLERANCE = 0.01
"""The issue's 1 % on throughput guarantees."""
PREEMPT_SLACK = 0.002
"""Preemptions per request EB⁺ may have above min(EB, MB): 0.2 % of requests (one preemption
in 500 requests; one fewer or more is a different cell boundary, not a different policy)."""
TTFT_FACTOR = 1.1
SLO_ATTAINMENT = 0.9


@dataclass
class Group:
    """One comparison: a base config and the policy key's values (the first is the policy)."""

    family: str
    label: dict[str, Any]
    base: dict[str, Any]
    policy_key: str
    policies: list[str]
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def group_id(self) -> str:
        return "-".join(str(v) for v in self.label.values()).replace(":", "_").replace("/", "_")


def fit_tp(model: str, gpu: str, min_tokens: int = 32_768) -> int | None:
    """The smallest TP in 1, 2, 4, 8 whose ranks divide the attention heads and whose KV cache
    holds ``min_tokens`` tokens (None if none does)."""
    spec, g = get_model(model), get_gpu(gpu)
    for tp in (1, 2, 4, 8):
        if spec.num_heads % tp:
            continue
        try:
            plan_memory(spec, g, tp, min_tokens=min_tokens)
        except ConfigError:
            continue
        return tp
    return None


def ebplus_groups(num_requests: int, gpus: tuple[str, ...] = tuple(GPUS)) -> list[Group]:
    groups = []
    for gpu in gpus:
        for model in EB_MODELS:
            tp = fit_tp(model, gpu)
            if tp is None:
                continue
            for mix, lengths in MIXES.items():
                for c in CONCURRENCY:
                    base = {
                        "model": model,
                        "gpu": gpu,
                        "tp": tp,
                        "interference": True,
                        "perf_model": PINNED_PERF_MODEL,
                        "workload": {
                            "num_requests": num_requests,
                            "concurrency": c,
                            "warmup_requests": 100,
                            **lengths,
                        },
                        "scheduler": {"token_budget": 14336, "max_seqs": 1024},
                    }
                    label = {"gpu": gpu, "model": model, "tp": tp, "mix": mix, "c": c}
                    groups.append(
                        Group("ebplus", label, base, "scheduler.batching", ["ebplus", "eb", "mb"])
                    )
    return groups


def augserve_base(model: str, gpu: str, tp: int, rate: float, window_s: float) -> dict[str, Any]:
    return {
        "model": model,
        "gpu": gpu,
        "tp": tp,
        "perf_model": PINNED_PERF_MODEL,
        "workload": {
            "augmented": "infercept-mix",
            "rate": rate,
            "num_requests": max(50, round(rate * window_s)),
        },
        "augment": {"swap_space_gb": 64 * tp},
        "slo": {"ttft_s": 1.0},
    }


def augserve_deployments(gpus: tuple[str, ...] = tuple(GPUS)) -> list[tuple[str, str, int]]:
    out = []
    for gpu in gpus:
        for model in AUG_MODELS:
            tp = fit_tp(model, gpu, min_tokens=16_384)
            if tp is not None:
                out.append((model, gpu, tp))
    return out


def augserve_groups(
    capacity: dict[str, float], window_s: float, gpus: tuple[str, ...] = tuple(GPUS)
) -> list[Group]:
    """``capacity[f"{model}/{gpu}/tp{tp}"]`` = the deployment's completed requests per second
    under a saturating load (measured first, :func:`capacity_probe`)."""
    groups = []
    for model, gpu, tp in augserve_deployments(gpus):
        cap = capacity[f"{model}/{gpu}/tp{tp}"]
        for f in LOAD_FACTORS:
            rate = round(cap * f, 3)
            label = {"gpu": gpu, "model": model, "tp": tp, "load": f}
            groups.append(
                Group(
                    "augserve",
                    label,
                    augserve_base(model, gpu, tp, rate, window_s),
                    "augment.serving_policy",
                    ["augserve", "infercept", "vllm"],
                    {"rate": rate},
                )
            )
    return groups


def capacity_probe(model: str, gpu: str, tp: int, num_requests: int = 600) -> dict[str, Any]:
    """INFERCEPT under a saturating load (everything at t = 0): its completed requests per
    second is the deployment's capacity for the load axis."""
    base = augserve_base(model, gpu, tp, 1.0, 1.0)
    base["workload"].update({"rate": "inf", "num_requests": num_requests})
    base["augment"]["serving_policy"] = "infercept"
    return base


def warmserve_settings() -> list[tuple[str, str, str]]:
    """(cluster spec, model set, Azure service) of every WarmServe ladder."""
    return [(c, m, t) for c in CLUSTER_SPECS for m in MODEL_SETS for t in AZURE]


def warmserve_group(
    setting: tuple[str, str, str], rate: float, placements: list[str] | None = None
) -> Group:
    spec, set_name, service = setting
    base = {
        "workload": {"trace": AZURE[service]},
        "slo": {"ttft_s": 2.0, "tpot_s": 0.1},
        "cluster": {
            "spec": spec, "models": MODEL_SETS[set_name], "mix": {"rate": rate},
            "perf_model": PINNED_PERF_MODEL,
        },
    }
    label = {"spec": spec, "models": set_name, "trace": service, "rate": rate}
    pols = list(WARM_PLACEMENTS if placements is None else placements)
    return Group("warmserve", label, base, "cluster.placement", pols)


def warmserve_groups() -> list[Group]:
    """The ladders' first rungs (:data:`CLUSTER_RATES`), every placement."""
    return [warmserve_group(s, r) for s in warmserve_settings() for r in CLUSTER_RATES]


def ladder_policies(attainment: dict[str, dict[float, float]]) -> list[str] | None:
    """The placements to run at a setting's next rung, or None when its ladder ends.

    ``attainment[placement][rate]`` = SLO attainment at the rungs run so far. A placement stays
    while it met the SLO at every rung it ran (:func:`highest_rate` can still grow); the ladder
    ends once neither WarmServe nor MuxServe stays (their highest rates are then known).
    ServerlessLLM always runs beside WarmServe: the TTFT guarantee pairs them in every cell.
    Dedicated GPUs (in no guarantee) run at the first rungs only, to bound the ladder's cost."""

    def stays(p: str) -> bool:
        lad = attainment.get(p, {})
        return bool(lad) and all(a >= SLO_ATTAINMENT for a in lad.values())

    if not (stays("warmserve") or stays("muxserve")):
        return None
    return ["warmserve", "serverlessllm", *(["muxserve"] if stays("muxserve") else [])]


# ----------------------------------------------------------------------------- guarantees
def check_ebplus(m: dict[str, dict[str, Any]], n: int) -> dict[str, Any]:
    """``m[policy]`` = the cell's summary metrics; ``n`` = measured requests.

    ``ok`` is the issue's rule as written: throughput ≥ max(EB, MB) − 1 % *and* preemptions ≤
    min(EB, MB) + slack. Where the faster baseline buys its throughput with preemptions (it
    preempts more than EB⁺ + slack) the two halves ask EB⁺ for that baseline's throughput
    without its preemptions, which no admission rule that keeps within the cache delivers;
    ``ok_frontier`` then holds EB⁺ to the preemption half and to the throughput of every
    baseline that preempts no more than EB⁺ (+ slack): EB⁺ is on the baselines'
    throughput/preemption frontier. ``tradeoff`` marks the cells where the two differ."""
    tput = {p: m[p]["token_throughput"] for p in m}
    pre = {p: m[p]["num_preemptions"] / n for p in m}
    best = max(tput["eb"], tput["mb"])
    ratio = tput["ebplus"] / best if best else 1.0
    ok_t = ratio >= 1 - TOLERANCE
    ok_p = pre["ebplus"] <= min(pre["eb"], pre["mb"]) + PREEMPT_SLACK
    peers = [p for p in ("eb", "mb") if pre[p] <= pre["ebplus"] + PREEMPT_SLACK]
    best_peer = max((tput[p] for p in peers), default=0.0)
    ratio_f = tput["ebplus"] / best_peer if best_peer else 1.0
    ok_f = ok_p and ratio_f >= 1 - TOLERANCE
    return {
        "ratio": ratio,
        "ratio_frontier": ratio_f,
        "vs_eb": tput["ebplus"] / tput["eb"] - 1 if tput["eb"] else 0.0,
        "vs_mb": tput["ebplus"] / tput["mb"] - 1 if tput["mb"] else 0.0,
        "preempt": pre,
        "ok_throughput": ok_t,
        "ok_preempt": ok_p,
        "ok": ok_t and ok_p,
        "ok_frontier": ok_f,
        "tradeoff": ok_f and not ok_t,
    }


def faster_baseline(check: dict[str, Any]) -> str:
    """The baseline with the higher token throughput in an EB⁺ cell's ``check``
    (EB⁺/b − 1 is smaller for the faster b)."""
    return "eb" if check["vs_eb"] < check["vs_mb"] else "mb"


def ebplus_verdict(default: dict[str, Any], throughput: dict[str, Any] | None) -> str:
    """How an EB⁺ cell's guarantee holds, from the checks of the default run
    (``prefer: no-preemption``) and of the ``prefer: throughput`` run (None: not run):
    ``strict`` (the issue's rule, defaults), ``frontier`` (the defaults are on the baselines'
    throughput/preemption frontier: preemptions ≤ min + slack, within 1 % of every baseline
    preempting no more), ``throughput`` (``prefer: throughput`` is within 1 % of
    max(EB, MB) and preempts ≤ the faster baseline + slack: the fallback to MB holds it),
    else ``open``."""
    if default["ok"]:
        return "strict"
    if default["ok_frontier"]:
        return "frontier"
    if throughput is not None:
        pre = throughput["preempt"]
        if (
            throughput["ratio"] >= 1 - TOLERANCE
            and pre["ebplus"] <= pre[faster_baseline(throughput)] + PREEMPT_SLACK
        ):
            return "throughput"
    return "open"


def check_augserve(m: dict[str, dict[str, Any]]) -> dict[str, Any]:
    eff = {p: m[p]["effective_throughput"] for p in m}
    p99 = {p: m[p]["ttft_p99_s"] for p in m}
    ref = eff["infercept"]
    ratio = eff["augserve"] / ref if ref else (1.0 if eff["augserve"] >= 0 else 0.0)
    ttft_ratio = p99["augserve"] / p99["infercept"] if p99["infercept"] else 1.0
    ok_e = eff["augserve"] >= ref * (1 - TOLERANCE)
    ok_t = p99["augserve"] <= TTFT_FACTOR * p99["infercept"]
    return {
        "ratio": ratio,
        "ttft_ratio": ttft_ratio,
        "eff": eff,
        "p99": p99,
        "ok_eff": ok_e,
        "ok_ttft": ok_t,
        "ok": ok_e and ok_t,
    }


def check_warmserve_ttft(p99: dict[str, dict[str, float]]) -> dict[str, Any]:
    """``p99[placement][model]`` = that model's P99 TTFT in the cell."""
    ws, sl = p99["warmserve"], p99["serverlessllm"]
    worst = max((ws[k] / sl[k] if sl[k] else 1.0) for k in ws)
    return {
        "ratio": 1 / worst if worst else float("inf"),
        "worst_model_ratio": worst,
        "ok": all(ws[k] <= sl[k] for k in ws),
    }


def highest_rate(attainment: dict[float, float]) -> float:
    """The highest rate of the ladder whose SLO attainment is ≥ 90 %, every lower rate too."""
    top = 0.0
    for rate in sorted(attainment):
        if attainment[rate] < SLO_ATTAINMENT:
            break
        top = rate
    return top
