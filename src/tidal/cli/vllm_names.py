"""vLLM's names for Tidal's ideas, accepted beside Tidal's own (one config key per idea).

Flags (``simulate``, ``plan``, ``serve``; ``fidelity`` where it has the idea) and ``sweep
--grid`` keys:

=========================== ================================ =============================
vLLM                        Tidal flag                       config key
=========================== ================================ =============================
``--max-num-seqs``          ``--max-seqs``                   ``scheduler.max_seqs``
``--max-num-batched-tokens`` ``--token-budget``              ``scheduler.token_budget``
``--tensor-parallel-size``  ``--tp``                         ``tp``
``-tp``                     ``--tp``                         ``tp``
``--num-prompts``           ``--num-requests``               ``workload.num_requests``
``--request-rate``          ``--rate``                       ``workload.rate``
``--max-concurrency``       ``--concurrency``                ``workload.concurrency``
``--random-input-len``      ``--prompt-len``                 ``workload.prompt_len``
``--random-output-len``     ``--output-len``                 ``workload.output_len``
``--burstiness``            ``--arrival-cv``                 ``workload.arrival_cv``
``--gpu-memory-utilization`` (same)                          ``memory.gpu_memory_utilization``
``--num-warmups``           ``--warmup``                     ``workload.warmup_requests``
``--quantization``, ``-q``  (same)                           ``quantization``
``--kv-cache-dtype``        (same)                           ``kv_cache_dtype``
=========================== ================================ =============================

Burstiness is the Gamma shape k of the inter-arrival gaps (vLLM ``bench serve``); Tidal's
arrival CV of the same Gamma process is ``1/sqrt(k)`` (k = 1: Poisson, CV 1).
"""

from __future__ import annotations

from typing import Any

from tidal.cli.flags import cv_of_burstiness, vllm_grid_keys
from tidal.core.errors import TidalError

GRID_KEYS = vllm_grid_keys()
"""vLLM names accepted as ``sweep --grid`` keys, from the flag table
(:mod:`tidal.cli.flags`; ``burstiness`` too, see :func:`grid_key`)."""




def arrival_cv(cv: float | None, burstiness: float | None) -> float | None:
    """The ``workload.arrival_cv`` of ``--arrival-cv`` or ``--burstiness`` (not both)."""
    if burstiness is None:
        return cv
    if cv is not None:
        raise TidalError("arrival_cv: give --arrival-cv or --burstiness, not both")
    return cv_of_burstiness(burstiness)


def grid_key(key: str, values: list[Any]) -> tuple[str, list[Any]]:
    """A ``--grid`` axis under its config key (vLLM names translated, burstiness → CV)."""
    if key == "burstiness":
        return "workload.arrival_cv", [cv_of_burstiness(float(v)) for v in values]
    return GRID_KEYS.get(key, key), values
