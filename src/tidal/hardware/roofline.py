"""Roofline upper bound on the throughput of a whole workload on one instance.

Every request needs FLOPs (2·params per token, causal attention) and bytes (KV reads of every
decode step, plus the weights, read once per decode step and shared by at most B concurrent
requests, B limited by the KV capacity and max_num_seqs). At peak FLOPS and bandwidth
(η = 1), time ≥ max(ΣFLOPs/F, Σbytes/BW); the bound is total tokens over that time. No schedule
can beat it; the gap to it is what a policy could still win.
"""

from __future__ import annotations

import numpy as np

from tidal.hardware.gpus import GPUSpec
from tidal.hardware.models import ModelSpec


def roofline_token_throughput(
    model: ModelSpec,
    gpu: GPUSpec,
    tp: int,
    prompt_len: np.ndarray,
    output_len: np.ndarray,
    kv_capacity_tokens: int,
    max_seqs: int,
    prefill: tuple[float, float] | None = None,
) -> float:
    """Upper bound on (prompt + output) tokens per second for these requests.

    ``prefill``: (prompt tokens a schedule must compute, Σ of their positions) when a prefix
    cache may serve the rest (:func:`tidal.workload.prefill_bound.unavoidable_prefill`);
    None: every prompt token is computed."""
    if len(prompt_len) == 0:
        return 0.0
    L = prompt_len.astype(np.float64)
    O = output_len.astype(np.float64)
    # Decode steps after the first token: O - 1, each attending L + j tokens (j = 1..O-1).
    dec = np.maximum(O - 1.0, 0.0)
    dec_ctx = dec * L + dec * (dec + 1.0) / 2.0
    computed, positions = (
        (float(L.sum()), float((L * L / 2.0).sum())) if prefill is None else prefill
    )
    flops = (
        model.linear_flops_per_token * computed
        + model.attn_flops_per_ctx_token * positions
        + (
            model.linear_flops_per_token * dec
            + model.head_flops_per_token * (1.0 + dec)
            + model.attn_flops_per_ctx_token * dec_ctx
        ).sum()
    )
    mean_footprint = float(np.mean(L + O / 2.0))
    batch = max(1.0, min(float(max_seqs), kv_capacity_tokens / max(mean_footprint, 1.0)))
    kv_read = model.kv_bytes_per_token * dec_ctx.sum()
    weight_read = model.weight_bytes * dec.sum() / batch
    t = max(flops / (gpu.flops * tp), (kv_read + weight_read) / (gpu.mem_bw * tp))
    return float((L + O).sum() / t) if t > 0 else 0.0
