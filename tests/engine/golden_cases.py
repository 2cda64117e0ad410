"""The behaviour-preservation battery: small runs of every scheduler composition, each reduced
to a hash per result column (and one over the policy's summary metrics).

``tests/engine/golden.json`` holds the hashes of the code before the policy-composition
refactor (issue 15); ``test_golden.py`` re-runs the battery and compares. Regenerate only for a
named bug fix that changes numbers (say which case and why in the commit message):

    PYTHONPATH=src python -m tests.engine.golden_cases --write
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

GOLDEN = Path(__file__).with_name("golden.json")
PINNED = "auto-vidur"
"""The step model the hashes were taken with: ``auto`` before issue 28 made the engine tables
its second choice (a paper's calibration, else the Vidur profiles, else the corrected
roofline)."""

_SYNTH = {
    "num_requests": 160,
    "rate": 30,
    "prompt_len": 600,
    "output_len": 150,
    "length_dist": "geometric",
}
_CLOSED = {
    "num_requests": 300,
    "concurrency": 96,
    "prompt_len": 400,
    "output_len": 200,
    "length_dist": "uniform",
}
_SWITCH = {
    "num_requests": 400,
    "concurrency": 256,
    "prompt_len": 100,
    "output_len": 600,
    "length_dist": "geometric",
}
"""On an A100 EB⁺ switches to EB on this load (and back once the clients drain)."""
_AUG = {"augmented": "infercept-mix", "num_requests": 80, "rate": 4}


def _digest(a: Any) -> str:
    h = hashlib.sha256()
    arr = np.asarray(a)
    if arr.dtype == object:
        h.update(repr(arr.tolist()).encode())
    else:
        h.update(str(arr.dtype).encode())
        h.update(np.ascontiguousarray(arr).tobytes())
    return h.hexdigest()[:16]


def _scalar(v: Any) -> Any:
    if isinstance(v, float):
        return "nan" if math.isnan(v) else repr(v)
    if isinstance(v, np.generic):
        return _scalar(v.item())
    return v


_WALL = ("wall", "_s_per", "simulated_requests_per_s")


def _metrics_digest(metrics: dict[str, Any]) -> str:
    keep = {k: _scalar(v) for k, v in sorted(metrics.items()) if not any(w in k for w in _WALL)}
    keep = {k: v for k, v in keep.items() if isinstance(v, (int, float, str, bool, type(None)))}
    return hashlib.sha256(json.dumps(keep, sort_keys=True).encode()).hexdigest()[:16]


def _sim(cfg: dict[str, Any]) -> dict[str, str]:
    from tidal.sim.config import load_config
    from tidal.sim.run import run_simulation

    res = run_simulation(load_config(cfg))
    out = {k: _digest(v) for k, v in sorted(res.columns.items())}
    out["_metrics"] = _metrics_digest(res.metrics)
    return out


def _single(batching: str, workload: dict[str, Any], **sched: Any) -> Callable[[], dict]:
    interference = sched.pop("interference", "auto")
    gpu = sched.pop("gpu", "h200")
    blocks = sched.pop("num_blocks", 1800)
    max_seqs = sched.pop("max_seqs", 128)
    ff = sched.pop("fast_forward", True)
    return lambda: _sim(
        {
            "fast_forward": ff,
            "perf_model": PINNED,
            "model": "qwen3-8b",
            "gpu": gpu,
            "interference": interference,
            "scheduler": {
                "batching": batching,
                "token_budget": 2048,
                "max_seqs": max_seqs,
                **sched,
            },
            "memory": {"num_blocks": blocks},
            "workload": workload,
        }
    )


def _switching(batching: str, **sched: Any) -> Callable[[], dict]:
    return _single(batching, _SWITCH, gpu="a100-80gb", num_blocks=8000, max_seqs=256, **sched)


def _augmented(policy: str, batching: str, ff: bool = True) -> Callable[[], dict]:
    return lambda: _sim(
        {
            "fast_forward": ff,
            "perf_model": PINNED,
            "model": "llama-2-7b",
            "gpu": "a100-80gb",
            "scheduler": {"batching": batching},
            "augment": {"serving_policy": policy},
            "memory": {"num_blocks": 1200},
            "workload": _AUG,
        }
    )


def _cluster(placement: str, batching: str = "mb", augmented: bool = False) -> Callable[[], dict]:
    mix: dict[str, Any] = {"rate": 3.0, "alpha": 1.0, "replay_s": 120}
    if augmented:
        mix["augmented"] = "infercept-mix"
    return lambda: _sim(
        {
            "workload": {"trace": "azure_llm_2023/AzureLLMInferenceTrace_code.csv.gz"},
            "scheduler": {"batching": batching},
            **({"augment": {"serving_policy": "augserve"}} if augmented else {}),
            "cluster": {
                "spec": "1x4:h100",
                "perf_model": PINNED,
                "models": ["llama-2-7b", "llama-2-7b", "llama-2-13b"],
                "placement": placement,
                "warmup_s": 20,
                "batch": 32,
                "mix": mix,
            },
        }
    )


def _replicas() -> dict[str, str]:
    from tidal.experiments.replicas import run_replicated
    from tidal.sim.config import load_config

    cfg = {
        "model": "llama-3.1-8b",
        "gpu": "l40s",
        "perf_model": PINNED,
        "scheduler": {"token_budget": 1024, "max_seqs": 64},
        "workload": {**_SYNTH, "num_requests": 200, "rate": 25, "arrival_cv": 2.0},
    }
    out: dict[str, str] = {}
    for router in ("round-robin", "least-loaded"):
        res = run_replicated(load_config(cfg), 2, router)
        for k, v in sorted(res.columns.items()):
            out[f"{router}.{k}"] = _digest(v)
    return out


def _planner() -> dict[str, str]:
    from tidal.experiments.planner import plan
    from tidal.experiments.space import load_plan_spec

    spec = {
        "base": {
            "model": "llama-3.1-8b",
            "perf_model": PINNED,
            "workload": {**_SYNTH, "num_requests": 200, "rate": 30},
        },
        "search": {
            "gpu": ["h100"],
            "tp": [1],
            "scheduler.token_budget": [512, 2048],
            "scheduler.batching": ["mb", "ebplus"],
        },
        "slo": {"ttft_p99_s": 0.5, "tpot_p99_s": 0.05},
        "max_replicas": 3,
        "top": 2,
    }
    out = plan(load_plan_spec(spec), exhaustive=True)
    rows = sorted(
        (ev.option.label, ev.capacity, ev.passed, _metrics_digest(ev.metrics))
        for ev in out.evaluations
    )
    return {"evaluations": hashlib.sha256(repr(rows).encode()).hexdigest()[:16]}


def _runtime(batching: str) -> Callable[[], dict]:
    def run() -> dict[str, str]:
        from tests.runtime.helpers import prompts
        from tidal.core.request import Request
        from tidal.runtime.config import RuntimeConfig, build_engine

        kw: dict[str, Any] = {"num_kv_blocks": 64, "block_size": 4, "watermark": 0.0}
        kw.update(num_threads=1, token_budget=48, max_seqs=6, batching=batching)
        if batching != "mb":
            kw["profile"] = _runtime_profile()
        rt = build_engine(RuntimeConfig(**kw))
        ps = prompts(14, 7, 3, 30)
        reqs = [Request(i, 0, len(p), 6 + 3 * (i % 5), token_ids=list(p)) for i, p in enumerate(ps)]
        sched, steps, step = rt.scheduler, [], 0
        pending = list(range(len(reqs)))
        while pending or sched.has_work():
            while pending and pending[0] // 2 <= step:
                sched.add_request(reqs[pending.pop(0)])
            plan = rt.engine.step()
            if plan is not None:
                steps.append(
                    (
                        tuple((r.request_id, n) for r, n in plan.prefills),
                        plan.num_decodes,
                        tuple(r.request_id for r in plan.preempted),
                    )
                )
            step += 1
            assert step < 5000
        return {
            "steps": hashlib.sha256(repr(steps).encode()).hexdigest()[:16],
            "tokens": hashlib.sha256(repr([r.token_ids for r in reqs]).encode()).hexdigest()[:16],
        }

    return run


def _runtime_profile() -> str:
    """A fixed step-time profile for the runtime's EB (written once per process)."""
    import tempfile

    from tidal.hardware.profiled import DEFAULT_KNOTS, FEATURES, ProfiledPerfModel

    coef = dict.fromkeys(FEATURES, 0.0)
    coef.update({"const": 2e-3, "tokens": 20e-6, "decodes": 5e-6, "decode_ctx": 1e-8})
    coef.update({f"hinge_{k}": 0.0 for k in DEFAULT_KNOTS})
    prof = ProfiledPerfModel(coef, DEFAULT_KNOTS, info={"model": "tiny-llama"})
    path = Path(tempfile.gettempdir()) / "tidal_golden_profile.json"
    path.write_text(json.dumps(prof.to_json()))
    return str(path)


CASES: dict[str, Callable[[], dict[str, str]]] = {
    "mb": _single("mb", _SYNTH),
    "mb.closed": _single("mb", _CLOSED),
    "eb.forecast": _single("eb", _CLOSED),
    "eb.clt": _single("eb", _CLOSED, eb={"n_bound": "clt"}),
    "eb.clt.n_max": _single("eb", _CLOSED, eb={"n_bound": "clt", "n_recovery": "n_max"}),
    "eb.forecast.no_interference": _single("eb", _SYNTH, interference=False),
    "ebplus.forecast": _single("ebplus", _CLOSED),
    "ebplus.clt": _single("ebplus", _CLOSED, eb={"n_bound": "clt", "mb_cap": "mb_safe"}),
    "ebplus.open": _single("ebplus", _SYNTH),
    "ebplus.no_interference": _single("ebplus", _CLOSED, interference=False),
    "ebplus.reference": _single(
        "ebplus",
        _CLOSED,
        eb={"n_bound": "clt", "mb_cap": "none", "surge_n": "ema", "crossover_n": "demand"},
    ),
    "eb.a100": _switching("eb"),
    "eb.a100.clt": _switching("eb", eb={"n_bound": "clt"}),
    "ebplus.a100": _switching("ebplus"),
    "ebplus.a100.clt": _switching("ebplus", eb={"n_bound": "clt", "mb_cap": "mb_safe"}),
    "ebplus.a100.no_interference": _switching("ebplus", interference=False),
    "ebplus.a100.reference": _switching(
        "ebplus",
        eb={"n_bound": "clt", "mb_cap": "none", "surge_n": "ema", "crossover_n": "demand"},
    ),
    "mb.a100": _switching("mb"),
    "mb.stepwise": _single("mb", _CLOSED, fast_forward=False),
    "eb.clt.stepwise": _single("eb", _CLOSED, eb={"n_bound": "clt"}, fast_forward=False),
    "ebplus.a100.stepwise": _switching("ebplus", fast_forward=False),
    "aug.vllm.mb": _augmented("vllm", "mb"),
    "aug.infercept.mb": _augmented("infercept", "mb"),
    "aug.augserve.mb": _augmented("augserve", "mb"),
    "aug.vllm.eb": _augmented("vllm", "eb"),
    "aug.infercept.eb": _augmented("infercept", "eb"),
    "aug.augserve.eb": _augmented("augserve", "eb"),
    "aug.infercept.ebplus": _augmented("infercept", "ebplus"),
    "aug.augserve.ebplus": _augmented("augserve", "ebplus"),
    "aug.augserve.ebplus.stepwise": _augmented("augserve", "ebplus", ff=False),
    "aug.vllm.ebplus": _augmented("vllm", "ebplus"),
    "cluster.dedicated": _cluster("dedicated"),
    "cluster.serverlessllm": _cluster("serverlessllm"),
    "cluster.muxserve": _cluster("muxserve"),
    "cluster.warmserve": _cluster("warmserve"),
    "cluster.warmserve.ebplus": _cluster("warmserve", "ebplus"),
    "cluster.warmserve.augserve.ebplus": _cluster("warmserve", "ebplus", augmented=True),
    "replicas": _replicas,
    "planner": _planner,
    "runtime.mb": _runtime("mb"),
    "runtime.eb": _runtime("eb"),
    "runtime.ebplus": _runtime("ebplus"),
}


def compute(names: list[str] | None = None) -> dict[str, dict[str, str]]:
    return {name: CASES[name]() for name in names or list(CASES)}


if __name__ == "__main__":
    if "--write" in sys.argv:
        data = compute()
        GOLDEN.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
        print(f"wrote {GOLDEN} ({len(data)} cases)")
    else:
        import time

        for name in CASES:
            t = time.perf_counter()
            CASES[name]()
            print(f"{name}: {time.perf_counter() - t:.2f} s")
