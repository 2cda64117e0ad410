"""Which config keys a run applies, by mode — one declared table (issue 32 §2).

Every run is in one mode: ``cluster`` (``cluster`` set), ``augmented``
(``workload.augmented``), ``trace`` (``workload.trace``), ``sessions`` (synthetic with
``workload.turns > 1``) or ``synthetic``. :data:`RULES` lists, per config key that some mode
ignores, the modes that apply it and why the others do not. :func:`ignored` returns every key
whose value differs from its default in a mode that ignores it; the config refuses such a
run (:class:`tidal.sim.config.SimulationConfig`), so that a value recorded in
``summary.json`` is a value the run applied. A key at its default is ignored silently: it is
the same run either way. Keys not listed apply in every mode.

Conditional rules (a key that applies in a mode only under a further setting) are in
:data:`CONDITIONS`. Format-dependent keys (``hash_block_tokens``, ``spread_ticks``: Mooncake
only) are checked where the trace's format is known (:func:`tidal.workload.build.build_workload`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import BaseModel

from tidal.sim.augment import AugmentConfig

SYN, SES, TRACE, AUG, CLU = "synthetic", "sessions", "trace", "augmented", "cluster"
MODES = (SYN, SES, TRACE, AUG, CLU)
GENERATED = frozenset({SYN, SES})
"""Synthetic requests (independent, or multi-turn sessions)."""
ONE = frozenset({SYN, SES, TRACE, AUG})
"""One instance (every mode but a cluster)."""


@dataclasses.dataclass(frozen=True)
class Rule:
    key: str
    """Dotted config key."""
    modes: frozenset[str]
    """The modes that apply it."""
    why: str
    """Why the other single-instance modes do not (completes "ignored in <mode> mode: ...");
    a cluster's reason is :func:`_cluster_why`."""


_CLUSTER_WHY = (
    "a cluster run takes its deployment and engine settings from cluster.* (cluster.spec, "
    "cluster.models, cluster.token_budget, cluster.batch, cluster.gpu_memory_utilization, "
    "cluster.perf_model)"
)
_MIX_WHY = "a cluster's requests are its mix of workload.trace (cluster.mix.*)"
_GEN_WHY = "only generated requests are shaped by it"
_LEN_WHY = "only generated requests draw their lengths from it"


def _rules() -> tuple[Rule, ...]:
    one = [
        "model", "gpu", "tp", "perf_model", "perf_host", "interference",
        "memory.gpu_memory_utilization", "memory.activation_reserve_gb", "memory.non_torch_gib",
        "memory.cuda_graph_gib", "memory.block_size", "memory.num_blocks",
        "memory.mem_fraction_static",
        "scheduler.token_budget", "scheduler.max_seqs", "scheduler.long_prefill_token_threshold",
        "scheduler.enable_mixed_chunk", "scheduler.max_prefill_tokens",
        "scheduler.schedule_conservativeness", "scheduler.scheduler_recv_interval",
        "engine", "engine_version", "data_parallel_size", "enable_expert_parallel",
        "pipeline_parallel_size", "async_scheduling", "moe_distribution", "moe_tp_size",
        "quantization",
        "kv_cache_dtype", "gemm_quant", "moe_quant",
    ]  # fmt: skip
    rules = [Rule(k, ONE, _CLUSTER_WHY) for k in one]
    w = "workload."
    rules += [
        Rule(w + "trace_format", frozenset({TRACE}), "only a replayed trace has a format"),
        Rule(w + "spread_ticks", frozenset({TRACE}), "only a Mooncake trace has ticks"),
        Rule(w + "hash_block_tokens", frozenset({TRACE}), "only a Mooncake trace has hash_ids"),
        Rule(w + "shared_prefix_groups", GENERATED, _GEN_WHY),
        Rule(w + "shared_prefix_len", GENERATED, _GEN_WHY),
        Rule(w + "n", frozenset({SYN}), "parallel sampling branches generated requests only"),
        Rule(w + "branch_policy", frozenset({SYN}), "it applies to parallel sampling (n)"),
        Rule(w + "parallel_probe", frozenset({SYN}), "it applies to parallel sampling (n)"),
        Rule(w + "turns", GENERATED, "only generated requests form multi-turn sessions"),
        Rule(w + "think_time_s", frozenset({SES}), "it applies to multi-turn sessions (turns > 1)"),
        Rule(w + "handoff", frozenset({SES}), "it applies to multi-turn sessions (turns > 1)"),
        Rule(w + "max_requests", ONE, _MIX_WHY),
        Rule(w + "num_requests", ONE, _MIX_WHY),
        Rule(w + "rate_scale", ONE, _MIX_WHY),
        Rule(w + "start_s", frozenset({SYN, TRACE, AUG}), "sessions are not windowed"),
        Rule(w + "end_s", frozenset({SYN, TRACE, AUG}), "sessions are not windowed"),
        Rule(w + "rate", frozenset({SYN, SES, AUG}), "a trace brings its own arrivals"),
        Rule(w + "arrival_cv", frozenset({SYN, SES, AUG}), "a trace brings its own arrivals"),
        Rule(w + "prompt_len", GENERATED, _LEN_WHY),
        Rule(w + "output_len", GENERATED, _LEN_WHY),
        Rule(w + "length_dist", GENERATED, _LEN_WHY),
        Rule(w + "length_jitter", GENERATED, _LEN_WHY),
        Rule(w + "length_sigma", GENERATED, _LEN_WHY),
        Rule(
            w + "max_prompt_len", frozenset({SYN, SES, TRACE}),
            "augmented contexts are capped by workload.max_context; a cluster's by "
            "cluster.max_model_len",
        ),
        Rule(
            w + "max_output_len", frozenset({SYN, SES, TRACE}),
            "augmented contexts are capped by workload.max_context; a cluster's by "
            "cluster.max_model_len",
        ),
        Rule(w + "call_time_dist", frozenset({AUG}), "only augmented requests make calls"),
        Rule(w + "max_context", frozenset({AUG}), "it caps augmented requests' contexts"),
        Rule(w + "concurrency", frozenset({SYN, SES, TRACE}), "augmented requests are open loop"),
        Rule(w + "warmup_requests", ONE, "a cluster run warms up with cluster.warmup_s"),
    ]  # fmt: skip
    pools = (
        "deployment.prefill.instances", "deployment.decode.instances", "deployment.prefill.tp",
        "deployment.decode.tp", "deployment.prefill.gpu", "deployment.decode.gpu",
        "deployment.kv_transfer.link", "deployment.request_overhead_ms",
    )  # fmt: skip
    rules += [Rule(k, ONE, "") for k in pools]  # a cluster's models are not disaggregated yet
    return tuple(rules)


RULES: tuple[Rule, ...] = _rules()


def _augmented_anywhere(cfg: Any) -> str | None:
    if cfg.workload.augmented is not None:
        return None
    if cfg.cluster is not None and cfg.cluster.mix.augmented is not None:
        return None
    return "it applies to augmented requests (--workload, or cluster.mix.augmented)"


def _host_link(cfg: Any) -> str | None:
    """The host link carries augmented swaps and the prefix cache's host tier."""
    if cfg.memory.host_cache_gib > 0:
        return None
    return _augmented_anywhere(cfg)


def _length(*dists: str) -> Callable[[Any], str | None]:
    def check(cfg: Any) -> str | None:
        if cfg.workload.length_dist in dists:
            return None
        names = " or ".join(dists)
        return f"it shapes length_dist {names} (length_dist is {cfg.workload.length_dist})"

    return check


def _open_loop(cfg: Any) -> str | None:
    if cfg.workload.concurrency is None:
        return None
    return "a closed loop (concurrency) sends a request when one finishes, not at arrival times"


def _servegen_days(cfg: Any) -> str | None:
    if cfg.cluster is None or cfg.cluster.mix.kind == "servegen":
        return None
    return "it applies to the servegen mix (--mix servegen)"


def _augment_keys() -> tuple[str, ...]:
    return tuple(f"augment.{k}" for k in AugmentConfig.model_fields)


CONDITIONS: tuple[tuple[str, Callable[[Any], str | None]], ...] = (
    *((k, _augmented_anywhere) for k in _augment_keys() if k != "augment.host_link_efficiency"),
    ("augment.host_link_efficiency", _host_link),
    ("slo.norm_latency_s", _augmented_anywhere),
    ("workload.length_jitter", _length("uniform", "uniform-below")),
    ("workload.length_sigma", _length("lognormal")),
    ("workload.rate", _open_loop),
    ("workload.arrival_cv", _open_loop),
    ("workload.rate_scale", _open_loop),
    ("cluster.mix.days", _servegen_days),
)
"""(key, check): the check returns why the run ignores ``key`` (None: it applies)."""


def _cluster_why(key: str) -> str:
    if key.startswith("workload."):
        return _MIX_WHY + ("; set its rate with --rate (cluster.mix.rate)" if "rate" in key else "")
    return _CLUSTER_WHY


def mode_of(cfg: Any) -> str:
    """The run's mode (module docstring)."""
    w = cfg.workload
    if cfg.cluster is not None:
        return CLU
    if w.augmented is not None:
        return AUG
    if w.trace is not None:
        return TRACE
    return SES if w.turns > 1 else SYN


def _lookup(model: BaseModel, key: str) -> tuple[Any, Any] | None:
    """(value, default) at dotted ``key`` (None: a section that is not set)."""
    *path, last = key.split(".")
    node: Any = model
    for part in path:
        node = getattr(node, part, None)
        if node is None:
            return None
    field = type(node).model_fields[last]
    default = field.get_default(call_default_factory=True)
    return getattr(node, last), default


def _differs(value: Any, default: Any) -> bool:
    if isinstance(value, BaseModel) and isinstance(default, BaseModel):
        return value.model_dump() != default.model_dump()
    return bool(value != default)


def ignored(cfg: Any) -> list[tuple[str, str]]:
    """(key, reason) of every key set away from its default in a mode that ignores it."""
    mode = mode_of(cfg)
    out: list[tuple[str, str]] = []
    for rule in RULES:
        if mode in rule.modes:
            continue
        found = _lookup(cfg, rule.key)
        if found is not None and _differs(*found):
            why = _cluster_why(rule.key) if mode == CLU else rule.why
            out.append((rule.key, f"ignored in {mode} mode: {why}"))
    seen = {k for k, _ in out}
    for key, check in CONDITIONS:
        if key in seen:
            continue
        node = _lookup(cfg, key)
        if node is None or not _differs(*node):
            continue
        reason = check(cfg)
        if reason is not None:
            out.append((key, f"ignored in {mode} mode: {reason}"))
    return out


def describe(found: list[tuple[str, str]], names: Mapping[str, str] | None = None) -> str:
    """One line per ignored key, naming the flag that set it where ``names`` knows it."""
    lines = []
    for key, why in found:
        flag = (names or {}).get(key)
        label = f"{key} ({flag})" if flag else key
        lines.append(f"{label}: {why}; remove it, or choose a mode that applies it")
    return "\n".join(lines)
