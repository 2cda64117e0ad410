"""Launch flags of the InferenceX recipes that the silicon sample does not record (issue 28).

InferenceX (public repository ``SemiAnalysisAI/InferenceX``) measured the SGLang rows of
DeepSeek-R1/V3, Qwen3.5-397B and GLM-5 with the launch scripts under
``benchmarks/single_node/`` (``<model>_<precision>_<gpu>.sh``, e.g. ``dsr1_fp8_b200.sh``).
Their B200/B300 scripts start the server with ``--scheduler-recv-interval``:

* ``dsr1_fp8_b200.sh``, ``dsr1_fp4_b200.sh``, ``dsr1_fp8_b300.sh``, ``dsr1_fp4_b300.sh``,
  ``qwen3.5_bf16_b200.sh``, ``qwen3.5_fp8_b200.sh``, ``qwen3.5_fp4_b200.sh``,
  ``qwen3.5_bf16_b300.sh``, ``qwen3.5_fp4_b300.sh``: 10, or 30 from 16 clients on
  ("if CONC ≥ 16, relax to ~30 requests between scheduler recv polls"); the FP8 DeepSeek
  scripts' TP 4 branch: 10;
* ``qwen3.5_fp8_b300.sh``, ``glm5_fp4_b200.sh``, ``glm5_fp4_b300.sh``: 10;
* the H200 scripts (``dsr1_fp8_h200.sh``, ``qwen3.5_fp8_h200.sh``, ``glm5_fp8_h200.sh``) and
  the GLM-5 FP8 ones: none (SGLang's 1).

The same scripts set ``--kv-cache-dtype fp8_e4m3`` for DeepSeek and GLM-5 on B200/B300
(``dsr1_fp{4,8}_b{2,3}00.sh``, ``glm5_fp{4,8}_b{2,3}00.sh``) and for Qwen3.5 FP8/FP4 on every
GPU (``qwen3.5_fp{4,8}_{h200,b200,b300}.sh``); not the H200 DeepSeek / GLM-5 scripts nor the
Qwen3.5 bf16 ones. A launch flag, not a weight precision: it applies with ``--bf16-fallback``
too (the KV plan and the attention tables of that dtype).

Read at the commits before each measurement date the rows carry (2026-02-20 … 2026-04-20:
``efd49e5``, ``12ba0ae``, ``49db200``, ``f34a83b``; the 2025-11 DeepSeek B200 rows ran
``benchmarks/dsr1_fp{4,8}_b200_docker.sh``, same rule; the flag and its rule are the same in
every version that holds the script). The sample's copies of these runs under other source names
(``source_file=2026-03-25.csv``, ``…-gap-analysis.csv``) hold the same numbers and get the same
flags. SGLang refuses the flag with data-parallel attention, so no such row gets it.
"""

from __future__ import annotations

from typing import Protocol


class _Row(Protocol):
    engine: str
    model: str
    system: str
    precision: str
    concurrency: int
    tp: int
    attention_dp: int


FAMILIES = {
    "deepseek-ai/DeepSeek-R1": "dsr1",
    "deepseek-ai/DeepSeek-V3": "dsr1",
    "Qwen/Qwen3.5-397B-A17B": "qwen3.5",
    "zhipuai/GLM-5": "glm5",
}
"""The sample's model → the InferenceX script family."""
FIXED_10 = {
    ("qwen3.5", "fp8", "b300_sxm"),
    ("glm5", "fp4", "b200_sxm"),
    ("glm5", "fp4", "b300_sxm"),
}
"""(family, precision, GPU) whose script passes ``--scheduler-recv-interval 10`` always."""
BY_CONCURRENCY = {"dsr1", "qwen3.5"}
"""Families whose B200/B300 scripts pass 10 below 16 clients and 30 from 16 on."""


def kv_cache_dtype(row: _Row) -> str | None:
    """``fp8`` where the row's InferenceX script sets ``--kv-cache-dtype fp8_e4m3``, else None
    (the model dtype)."""
    family = FAMILIES.get(row.model)
    if row.engine != "sglang" or family is None:
        return None
    if family == "qwen3.5":
        return "fp8" if row.precision in ("fp8", "fp4") else None
    return "fp8" if row.system in ("b200_sxm", "b300_sxm") else None


def scheduler_recv_interval(row: _Row) -> int | None:
    """The row's ``--scheduler-recv-interval`` from its InferenceX script, or None (SGLang's
    default 1, or not an SGLang row of those scripts)."""
    family = FAMILIES.get(row.model)
    if row.engine != "sglang" or family is None or row.attention_dp > 1:
        return None
    if row.system not in ("b200_sxm", "b300_sxm"):
        return None
    if (family, row.precision, row.system) in FIXED_10:
        return 10
    if family not in BY_CONCURRENCY:
        return None
    if family == "dsr1" and row.precision == "fp8" and row.tp == 4:
        return 10  # the FP8 scripts' TP 4 branch
    return 30 if row.concurrency >= 16 else 10
