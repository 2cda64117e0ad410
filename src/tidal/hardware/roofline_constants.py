"""The corrected roofline's fitted constants: per GPU, per link kind, per host mode, global.

:class:`RooflineConstants` is the schema of ``data/profiles/roofline_fit.json``
(``tidal-roofline-fit/1``), written by ``bench/roofline_fit.py`` and ``bench/host_fit.py`` and
read once by :func:`bundled_constants`; a GPU without its own data borrows a family member's
(``family``), and its link fits come from ``link_borrowed`` (rule R1). The model that uses
them is :class:`tidal.hardware.corrected.CorrectedRooflinePerfModel`.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from tidal.core.errors import ConfigError
from tidal.hardware.allreduce import LinkConst

CONSTANTS_PATH = Path(__file__).resolve().parent.parent / "data" / "profiles" / "roofline_fit.json"


class _C(BaseModel):
    model_config = ConfigDict(extra="forbid")


class GemmConst(_C):
    m_half_ridge: float = 0.3
    """M_½ in units of the GPU's ridge point F·dtype/(2·BW) (the M where a weight-bound GEMM
    turns compute-bound), so that the corner's shape carries over between GPUs."""
    t0_us: float = 3.0
    p: float = 3.0
    p_k: float = 0.0
    """Growth of the corner exponent with the GEMM's size: ``p + p_k·log2(S/2²⁶)`` (at least
    1), S = ``N·K`` if ``p_by`` is ``nk`` else ``K·2¹⁴`` (0: one p for every GEMM)."""
    p_by: str = "k"
    m_tile: int = 0
    """Tile quantisation in M (0: off): the compute term uses ⌈M/m_tile⌉·m_tile rows, as a
    GEMM kernel computes whole tiles (``bench/step_accuracy.py`` compares both)."""


class GPUConst(_C):
    eta_flops: float = 0.75
    eta_bw: float = 0.8


class AttentionConst(_C):
    decode_t0_us: float = 15.0
    decode_per_seq_us: float = 0.0
    decode_eta_bw: float = 0.7
    prefill_t0_us: float = 15.0
    prefill_eta_flops: float = 0.5


class HostConst(_C):
    step_us: float = 500.0
    per_seq_us: float = 5.0


HOST_MODES = ("vllm-v1", "vidur")
"""Which engine's per-step host time the models add (``docs/PROFILE_FORMAT.md``, BENCHMARKS.md
issue 13): ``vllm-v1`` (default) fitted on the EB paper's vLLM-v1 step constants of other
models than the one cross-checked (``bench/host_fit.py``); ``vidur``: Vidur's host times of
an older vLLM (``cpu_overheads``, CodeLlama-34B TP 2, batches 8–128)."""
DEFAULT_HOST = "vllm-v1"


def check_host(host: str, field: str = "perf_host") -> str:
    """``host`` if it names a host model of :data:`HOST_MODES`; else a ConfigError on ``field``."""
    if host not in HOST_MODES:
        raise ConfigError(field, f"unknown host model {host!r}", f"use one of {HOST_MODES}")
    return host


class RooflineConstants(_C):
    format: str = "tidal-roofline-fit/1"
    fitted_on: list[str] = []
    gemm: GemmConst = GemmConst()
    gpu: dict[str, GPUConst] = {}
    family: dict[str, str] = {}
    """GPU without data → GPU whose constants it borrows (same architecture and memory type)."""
    elementwise: dict[str, tuple[float, float, float]] = {}
    """op → (t0 µs, k, r ns/byte): ``t0 + r·b + k·M·b/BW`` for b bytes per token (the r term:
    one thread block per row at small M); ``emb`` is the per-step embedding gather."""
    link: dict[str, LinkConst] = {}
    """``<gpu>/<link kind>`` → constants (the GPU part resolved through ``family``)."""
    link_borrowed: dict[str, LinkConst] = {}
    """The same keys fitted on the sweeps capped by rule R1 (a node's smaller TP group is never
    slower than its larger one at the same size; ``bench/roofline_fit.tp_capped``): what a GPU
    without its own sweep borrows (empty: the ``link`` fits themselves)."""
    attention: AttentionConst = AttentionConst()
    host: HostConst = HostConst()
    """The ``vidur`` host term (fitted by ``bench/roofline_fit.py`` on Vidur's host times)."""
    hosts: dict[str, HostConst] = {}
    """Other host terms by mode (``vllm-v1``: ``bench/host_fit.py``)."""

    def host_const(self, mode: str) -> HostConst:
        return self.host if mode == "vidur" else self.hosts.get(mode, self.host)

    def gpu_const(self, gpu: str) -> GPUConst:
        return self.gpu.get(self._family(gpu), GPUConst())

    def link_source(self, gpu: str, link: str, tp: int = 0) -> str | None:
        """The GPU whose fitted link constants ``gpu`` uses: its own where it has a sweep of
        ``link`` (even without kernel profiles), else its family's; None when neither has."""
        base = gpu.partition("@")[0]
        for g in (base, self._family(gpu)):
            if f"{g}/{link}/tp{tp}" in self.link or f"{g}/{link}" in self.link:
                return g
        return None

    def link_const(self, gpu: str, link: str, tp: int = 0) -> LinkConst:
        """``<gpu>/<link>/tp<N>`` (fitted per group size), else ``<gpu>/<link>``, of
        :meth:`link_source` — from ``link_borrowed`` where that source is another GPU and has
        it; the defaults where nothing is fitted."""
        src = self.link_source(gpu, link, tp)
        key = f"{src}/{link}"
        fits = self.link
        if src != gpu.partition("@")[0] and (f"{key}/tp{tp}" in self.link_borrowed
                                             or key in self.link_borrowed):  # fmt: skip
            fits = self.link_borrowed
        return fits.get(f"{key}/tp{tp}", fits.get(key, LinkConst()))

    def _family(self, gpu: str) -> str:
        base = gpu.partition("@")[0]
        return base if base in self.gpu else self.family.get(base, base)


@lru_cache(maxsize=1)
def bundled_constants() -> RooflineConstants:
    """The bundled fit (defaults where the file is absent), read once."""
    if not CONSTANTS_PATH.exists():
        return RooflineConstants()
    return RooflineConstants.model_validate(json.loads(CONSTANTS_PATH.read_text()))
