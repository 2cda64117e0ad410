"""The serving engine's own scheduler defaults, applied where a config leaves them unset.

``engine: sglang`` (SGLang 0.5's ``server_args``, Apache-2.0; docs/research/engine-data.md):

* batching ``prefill-first`` — SGLang runs prefill batches and decode batches apart unless
  ``--enable-mixed-chunk`` is given (:mod:`tidal.engine.prefill_first`);
* token budget = ``chunked_prefill_size``: 2,048 on GPUs with less than 35 GiB, 8,192 below
  160 GiB (A100, H100, H200), 16,384 above (B200, B300); the instance's, which attention DP
  divides among its ranks (:func:`tidal.sim.single.instance_token_budget`);
* ``gpu_memory_utilization`` = ``mem_fraction_static`` 0.88 (SGLang's default when it cannot
  size its reserve from the model).

``engine: vllm`` keeps Tidal's defaults, which are vLLM V1's (mixed chunked prefill, 8,192
batched tokens, 256 sequences, 0.9 of the GPU memory). A key the config sets is never changed.
"""

from __future__ import annotations

from typing import Any

from tidal.core.errors import ConfigError
from tidal.hardware.gpus import get_gpu

GIB = 1024**3


def sglang_chunked_prefill_size(mem_bytes: float) -> int:
    """SGLang's default ``chunked_prefill_size`` for a GPU of ``mem_bytes``."""
    if mem_bytes < 35 * GIB:
        return 2048
    return 8192 if mem_bytes < 160 * GIB else 16384


def apply_engine_defaults(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` (a raw simulation config) with the chosen engine's defaults filled in."""
    if data.get("engine") != "sglang" or data.get("cluster") is not None:
        return data
    try:
        mem = get_gpu(str(data.get("gpu", "h100"))).mem_bytes
    except ConfigError:  # an unknown GPU: the config's own validation names it
        return data
    out = dict(data)
    sched = dict(out.get("scheduler") or {})
    sched.setdefault("batching", "prefill-first")
    sched.setdefault("token_budget", sglang_chunked_prefill_size(mem))
    out["scheduler"] = sched
    memory = dict(out.get("memory") or {})
    if "num_blocks" not in memory:
        memory.setdefault("gpu_memory_utilization", 0.88)
    out["memory"] = memory
    return out
