"""How the silicon sample records vLLM's expert-parallel deployments, and what ran (issue 28).

Two facts about the aggregated rows of ``systems/silicon_sample.csv`` with
``attention_dp_size > 1``:

* ``batch_size`` is per attention-DP rank: the client's ``--max-concurrency`` is
  ``batch_size × attention_dp_size``, the ``silicon_concurrency=`` of ``silicon_data_source``
  (as in the disaggregated rows, ``silicon_disagg_rows``). :func:`total_concurrency`.
* Every vLLM row with attention DP (MiniMax-M2.5 and Kimi-K2.5, 97 rows) has
  ``attention_dp_size = tp_size = T`` and ``moe_ep_size = T²``, while the TRT-LLM rows record
  attention DP as ``tp_size 1``. Where the row's own id carries the launch flags they read
  ``tp4_ep4`` / ``tp2_ep2`` (``…_h100_sxm_vllm_fp8_agg_8192x1024_c32_tp4_ep4_1322``): TP T with
  ``--enable-expert-parallel``, EP T. vLLM sizes the expert-parallel group as TP × DP
  (``FusedMoEParallelConfig.make``, ``vllm/model_executor/layers/fused_moe/config.py``: with
  ``enable_expert_parallel`` the experts are split over ``dp_size × tp_size`` devices,
  ``ep_size`` = that product), so EP T with TP T means DP 1 on T GPUs; T² would need T² GPUs
  (16 H100s, two nodes, for ``tp4_ep4``). The measurements say the same: those rows and the
  rows recorded ``tp T, dp 1, moe_ep T`` at the same total concurrency measure the same TPOT
  (H100 FP8 TP 4, C 16/32/64: 15.47/20.04/25.69 ms vs 15.54/20.02/25.66 ms; B200 FP8 TP 2,
  C 4…256: within 1 %), and ``config_id`` 690/691 of the db-dump are those very measurements
  (same TTFT to the µs). :func:`served_layout` reads every such row as TP T, EP T, DP 1.

The replay runs the served layout and notes the recorded one per row; ``--recorded-layout``
(``bench/silicon.py``) runs the columns as written instead (a what-if).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from silicon_rows import Row


def total_concurrency(batch_size: int, attention_dp: int) -> int:
    """The client's ``--max-concurrency``: the per-rank batch times the attention-DP ranks."""
    return batch_size * max(attention_dp, 1)


def is_vllm_ep_encoding(row: Row) -> bool:
    """A vLLM row recorded as ``tp T × attention_dp T``, ``moe_tp 1``, ``moe_ep T²`` (T > 1):
    the sample's encoding of TP T with expert parallelism on T GPUs (module docstring)."""
    t = row.tp
    return (
        row.engine == "vllm"
        and t > 1
        and row.attention_dp == t
        and row.moe_tp == 1
        and row.moe_ep == t * t
    )


def served_layout(row: Row) -> tuple[Row, str]:
    """(the row with the parallel layout that ran, a note naming the recorded one, or "").
    The concurrency is already the total one (:func:`total_concurrency`) and stays."""
    if not is_vllm_ep_encoding(row):
        return row, ""
    note = (
        f"served as TP {row.tp} EP {row.tp} on {row.tp} GPUs "
        f"(recorded tp {row.tp} x dp {row.attention_dp}, moe_ep {row.moe_ep})"
    )
    return dataclasses.replace(row, attention_dp=1, moe_ep=row.tp), note
