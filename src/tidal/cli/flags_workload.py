"""The augmented-workload and prompt-sharing flag tables of ``tidal simulate`` (one row per
flag; joined in :data:`tidal.cli.flags.SIMULATE`, which re-exports them): tool-calling
workloads and their serving policy (``--workload``, ``--serving-policy``, …), and the prompt
structure of a workload — shared prefixes, parallel sampling, multi-turn sessions
(``--shared-prefix-groups``, ``--n``, ``--turns``, …). ``shows`` is the config's default,
checked by tests/cli/test_flags.py.
"""

from __future__ import annotations

from tidal.augment.bundles import SERVING_POLICIES
from tidal.augment.predictor import PREDICTORS
from tidal.cli.flagspec import Flag

S, I, F = str | None, int | None, float | None

AUGMENTED = (
    Flag(
        "workload", S,
        "Augmented workload: infercept-mix | infercept:TYPE[,TYPE] | augmented:FILE.jsonl.",
        "workload.augmented",
    ),
    Flag(
        "call_time_dist", S, "Augmented: call times per type, or N|U|R|L|B (INFERCEPT).",
        "workload.call_time_dist", shows="type",
    ),
    Flag(
        "serving_policy", S,
        f"Augmented: {SERVING_POLICIES.describe(summaries=False)}.",
        "augment.serving_policy", shows="vllm",
    ),
    Flag(
        "predictor", S,
        f"Augmented: {PREDICTORS.describe(summaries=False)} (AugServe's predictions).",
        "augment.predictor", shows="noisy",
    ),
    Flag(
        "swap_space_gb", F, "Augmented: host swap space per GPU for KV, GB.",
        "augment.swap_space_gb", shows=64.0,
    ),
    Flag(
        "slo_norm_latency", F,
        "Augmented: normalized-latency SLO (s/token) of effective throughput.",
        "slo.norm_latency_s",
    ),
    Flag(
        "warmup", I, "Warm-up requests sent first and not measured.",
        "workload.warmup_requests", vllm=("--num-warmups",), shows=0,
    ),
)  # fmt: skip

PREFIXES = (
    Flag(
        "hash_block_tokens", I, "Mooncake: tokens per hash_ids entry.",
        "workload.hash_block_tokens", shows=512,
    ),
    Flag(
        "shared_prefix_groups", I, "Synthetic: G shared system prompts.",
        "workload.shared_prefix_groups", shows=0,
    ),
    Flag(
        "shared_prefix_len", I, "Synthetic: tokens of each shared system prompt.",
        "workload.shared_prefix_len", shows=0,
    ),
    Flag("n", I, "Synthetic: parallel sampling, branches per prompt.", "workload.n", shows=1),
    Flag(
        "branch_policy", S, "Parallel sampling: all (to completion) or parallel-probe.",
        "workload.branch_policy", shows="all",
    ),
    Flag("turns", I, "Synthetic: turns per multi-turn session.", "workload.turns", shows=1),
    Flag(
        "handoff", S, "Sessions/agent chains: context handed on as kv or text.",
        "workload.handoff", shows="kv",
    ),
    Flag(
        "think_time", F, "Sessions: mean think time between turns (s).", "workload.think_time_s",
        shows=0.0,
    ),
)  # fmt: skip
