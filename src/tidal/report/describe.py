"""Say in one line which configuration made a figure.

A figure of several runs is titled with what they share (:func:`describe`) and each curve is
labelled with what differs (:func:`differences`), both from the runs' recorded configs.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any


def flatten(cfg: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in cfg.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


def _workload(f: Mapping[str, Any], skip: Sequence[str]) -> str:
    trace = f.get("workload.trace")
    if trace:
        text = os.path.basename(str(trace)).removesuffix(".gz").removesuffix(".csv")
        scale = f.get("workload.rate_scale", 1.0)
        if scale not in (None, 1, 1.0) and "workload.rate_scale" not in skip:
            text += f" ×{_fmt(scale)}"
        if f.get("workload.end_s"):
            text += f" [{_fmt(f.get('workload.start_s') or 0)}, {_fmt(f['workload.end_s'])}) s"
        return text
    text = f"{f.get('workload.num_requests')} req"
    if f.get("workload.concurrency"):
        text += f" @ {f['workload.concurrency']} clients"
    elif "workload.rate" not in skip:
        text += f" @ {_fmt(f.get('workload.rate'))} req/s"
    return f"{text}, {f.get('workload.length_dist', 'fixed')} lengths"


def describe(cfg: Mapping[str, Any], skip: Sequence[str] = ()) -> str:
    """``llama-3.1-8b on 2× (1× h100) · mb/fcfs B=8192 N=256 · conv ×4 · SLO TTFT 2 s``,
    leaving out the fields in ``skip`` (they vary and go to the legend). A top-level
    ``replicas`` key (planner deployments) multiplies the device."""
    f = flatten(cfg)
    replicas = f.get("replicas") if "replicas" not in skip else None

    def has(*keys: str) -> bool:
        return not any(k in skip for k in keys)

    parts = []
    hw = []
    cluster = bool(f.get("cluster.spec"))
    augmented = f.get("workload.augmented") or f.get("cluster.mix.augmented")
    if cluster:  # a multi-model cluster: model, gpu, tp and the engines' B/N are its own
        models = f.get("cluster.models")
        names = ", ".join(models) if isinstance(models, list) else str(models)
        parts.append(f"{f.get('cluster.placement')} on {f['cluster.spec']} ({names})")
        skip = [*skip, "model", "gpu", "tp", "scheduler.token_budget", "scheduler.max_seqs"]
        skip.append("scheduler.ordering")
    if has("model"):
        hw.append(str(f.get("model")))
    if has("gpu"):
        dev = f"{f.get('tp', 1)}× {f.get('gpu')}" if has("tp") else str(f.get("gpu"))
        hw.append(f"on {replicas}× ({dev})" if replicas and replicas > 1 else f"on {dev}")
    if hw:
        parts.append(" ".join(hw))
    sched = []
    if cluster or augmented:  # the ordering is the cluster's or the serving policy's
        if has("scheduler.batching"):
            sched.append(str(f.get("scheduler.batching")))
    elif has("scheduler.batching", "scheduler.ordering"):
        sched.append(f"{f.get('scheduler.batching')}/{f.get('scheduler.ordering')}")
    if augmented and has("augment.serving_policy"):
        sched.append(f"+ {f.get('augment.serving_policy', 'vllm')} on {augmented}")
    if has("scheduler.token_budget"):
        sched.append(f"B={f.get('scheduler.token_budget')}")
    if has("scheduler.max_seqs"):
        sched.append(f"N={f.get('scheduler.max_seqs')}")
    if sched:
        parts.append(" ".join(sched))
    if has("workload.trace", "workload.num_requests"):
        parts.append(_workload(f, skip))
    if has("slo.ttft_s", "slo.tpot_s") and "slo.ttft_s" in f:
        parts.append(f"SLO TTFT {_fmt(f['slo.ttft_s'])} s, TPOT {_fmt(f['slo.tpot_s'])} s")
    targets = cfg.get("slo_targets")
    if isinstance(targets, Mapping) and targets:  # a plan's: {"ttft_p99_s": 1.0, ...}
        parts.append("SLO " + ", ".join(_target(k, v) for k, v in targets.items()))
    return " · ".join(parts)


def _target(key: str, value: Any) -> str:
    """``ttft_p99_s``, 1 → ``p99 TTFT ≤ 1 s``."""
    metric, _, rest = key.partition("_")
    stat = rest.removesuffix("_s")
    return f"{stat} {metric.upper()} ≤ {_fmt(value)} s".strip()


def differences(configs: Sequence[Mapping[str, Any]]) -> tuple[list[str], list[str]]:
    """The dotted keys whose values differ between configs (``seed`` ignored), and one label
    per config naming those values."""
    flats = [flatten(c) for c in configs]
    keys: list[str] = []
    for f in flats:
        keys.extend(k for k in f if k not in keys)
    varying = [k for k in keys if k != "seed" and len({repr(f.get(k)) for f in flats}) > 1]
    labels = [
        ", ".join(f"{k.rsplit('.', 1)[-1]}={_fmt(f.get(k))}" for k in varying) or "run"
        for f in flats
    ]
    return varying, labels
