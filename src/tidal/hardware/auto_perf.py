"""``--perf-model auto``: the step model a deployment gets when the user names none.

In this order (issue 28), the first that applies:

1. the serving engine's measured operator tables (``engine``,
   :class:`~tidal.hardware.engine_perf.EnginePerfModel`) when the GPU has tables for the
   configured engine: today's kernels, per engine and version (on NVIDIA's silicon sample the
   tables' TPOT median |error| is 12.0 % against 94.5 % for the older default;
   BENCHMARKS.md, issue 28);
2. a paper's calibration for exactly (model, GPU, TP) (:data:`~tidal.hardware.calibration.
   CALIBRATIONS`: the EB paper's Qwen3-8B constants, INFERCEPT's profiles);
3. the bundled Vidur operator profiles of 2023 (``measured``, alias ``vidur``);
4. the corrected roofline.

The calibrations rank below the tables because they describe the papers' testbeds, not the
engine users run: the EB paper's Qwen3-8B constants were measured in vLLM's eager mode (no CUDA
graphs: 8.9 ms per decode step at batch 1 on an H200, where the tables of vLLM 0.14–0.24 give
5.2 ms) and INFERCEPT's on a vLLM-0.2 fork. ``--perf-model linear`` still selects a paper's
calibration where one exists.

Every model the catalog or a ``config.json`` describes is expressible by the tables (the parts
a table lacks fall back to the corrected roofline inside :class:`EnginePerfModel`, recorded in
``perf_model_tables.parts``), so step 1 is skipped only where the GPU has no tables for the
engine (A40; SGLang on a GPU with vLLM tables only): :func:`auto_tables` decides it from the
tables' directory, before any table is read, and any other error of the tables propagates.

``auto-vidur`` keeps the order before issue 28 (2, 3, 4): the papers' reproductions, the golden
battery and the cluster hashes pin it. ``summary.json``'s ``perf_model_source`` says which one
was taken (``calibrated:…``, ``engine:…``, ``measured:…``, ``corrected-roofline``), and
``perf_model_tables`` which tables, when tables are used.
"""

from __future__ import annotations

from dataclasses import dataclass

from tidal.core.errors import ConfigError
from tidal.hardware import engine_data
from tidal.hardware.engine_perf import system_of
from tidal.hardware.gpus import GPUSpec
from tidal.hardware.models import ModelSpec

LEGACY_AUTO = "auto-vidur"
"""The ``auto`` of before issue 28: a paper's calibration, else the Vidur profiles, else the
corrected roofline."""

ENGINE_ONLY = {
    "engine_version": "--engine-version",
    "data_parallel_size": "--data-parallel-size",
    "enable_expert_parallel": "--enable-expert-parallel",
    "moe_tp_size": "--moe-tp-size",
    "pipeline_parallel_size": "--pipeline-parallel-size",
    "async_scheduling": "--async-scheduling/--no-async-scheduling",
}
"""Settings only the engine tables model (config key → CLI flag)."""


@dataclass(frozen=True)
class EngineChoice:
    """Which engine's tables ``--perf-model engine`` reads (``SimulationConfig``'s keys
    ``engine``, ``engine_version``, ``enable_expert_parallel``, ``moe_distribution``)."""

    engine: str = "vllm"
    version: str | None = None
    expert_parallel: bool = False
    moe_distribution: str = "power_law_1.01"
    data_parallel: int = 1
    moe_tp: int | None = None
    """MoE tensor parallelism of a hybrid TP × EP MoE (SGLang's ``--moe-dense-tp``-style
    splits); None: all TP, or all EP with ``expert_parallel``."""
    pipeline: int = 1
    """Pipeline stages (vLLM's ``--pipeline-parallel-size``; :mod:`tidal.hardware.pipeline`)."""
    async_scheduling: bool | None = None
    """vLLM's ``--async-scheduling`` / ``--no-async-scheduling``; None: the version's default
    (:mod:`tidal.hardware.engine_host`)."""


def auto_tables(model: ModelSpec, gpu: GPUSpec, tp: int, engine: str = "vllm") -> str | None:
    """The package's GPU system whose ``engine`` tables ``auto`` reads for (model, GPU, TP),
    or None when the GPU has none for ``engine`` (``auto`` then takes a paper's calibration,
    the Vidur profiles or the corrected roofline)."""
    del model, tp  # every deployment of a GPU with tables reads them
    return tables_system(gpu, engine)


def tables_system(gpu: GPUSpec, engine: str = "vllm") -> str | None:
    """The GPU's system id when it has GEMM tables of ``engine`` (what every deployment reads
    first), else None; None too without the package (``auto`` then uses the older models)."""
    system = system_of(gpu)
    if system is None or engine not in engine_data.ENGINES:
        return None
    try:
        return system if engine_data.versions(system, "gemm", engine) else None
    except ConfigError:  # aiconfigurator-core not installed: no tables anywhere
        return None


def engine_only_settings(engine: EngineChoice | None) -> list[str]:
    """The engine-only settings (config keys) that ``engine`` sets away from their defaults."""
    if engine is None:
        return []
    out = []
    if engine.version is not None:
        out.append("engine_version")
    if engine.data_parallel > 1:
        out.append("data_parallel_size")
    if engine.expert_parallel:
        out.append("enable_expert_parallel")
    if engine.moe_tp is not None:
        out.append("moe_tp_size")
    if engine.pipeline > 1:
        out.append("pipeline_parallel_size")
    if engine.async_scheduling is not None:
        out.append("async_scheduling")
    return out


def refuse_engine_only(keys: list[str], why: str, tables_elsewhere: bool = False) -> ConfigError:
    """The error for engine-only settings on a deployment whose step model has no tables;
    ``tables_elsewhere``: the GPU has none (the fix is another GPU), else ``engine`` has them."""
    flags = ", ".join(ENGINE_ONLY[k] for k in keys)
    fix = (f"drop {flags}, or use a GPU with tables (tidal gpus)" if tables_elsewhere
           else f"set --perf-model engine, or drop {flags}")  # fmt: skip
    return ConfigError(keys[0], f"{', '.join(keys)} needs the engine tables, but {why}", fix)


def check_auto_engine_settings(
    model: ModelSpec, gpu: GPUSpec, tp: int, engine: EngineChoice | None
) -> None:
    """Raise a ``ConfigError`` naming the field when ``auto`` on (model, GPU, TP) takes a model
    without tables while the config sets an engine-only setting."""
    keys = engine_only_settings(engine)
    if not keys:
        return
    del model, tp  # the tables apply to every deployment of a GPU that has them
    name = engine.engine if engine is not None else "vllm"
    if tables_system(gpu, name) is None:
        raise refuse_engine_only(keys, f"{gpu.name} has no {name} tables", True)


def resolve_auto(
    model: ModelSpec, gpu: GPUSpec, tp: int, engine: EngineChoice | None
) -> tuple[str, EngineChoice | None]:
    """Which ``build_perf_model`` kind ``auto`` resolves to for this deployment: ``engine``
    (with the engine choice), else ``auto-vidur`` (a calibration, the Vidur profiles or the
    corrected roofline). Engine-only settings without tables are refused here."""
    e = engine or EngineChoice()
    check_auto_engine_settings(model, gpu, tp, e)
    if auto_tables(model, gpu, tp, e.engine) is not None:
        return "engine", e
    return LEGACY_AUTO, engine
