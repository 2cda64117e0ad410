"""The check of the engine-only settings (``engine_version``, ``data_parallel_size``,
``enable_expert_parallel``, ``moe_tp_size``, ``pipeline_parallel_size``) on a simulation
config: the base config's validator and each deployment pool's effective config
(``sim/deployment.py``) run it."""

from __future__ import annotations

from typing import Any

from tidal.core.errors import ConfigError
from tidal.hardware.auto_perf import (
    check_auto_engine_settings,
    engine_only_settings,
    refuse_engine_only,
)
from tidal.hardware.calibration import engine_choice
from tidal.hardware.gpus import get_gpu
from tidal.hardware.pipeline import check_pipeline


def check_pipeline_config(cfg: Any) -> None:
    """``pipeline_parallel_size`` within the model's layers, and not beside what the pipeline
    round does not model (speculative decoding); raises ``ValueError`` naming the key."""
    pp = getattr(cfg, "pipeline_parallel_size", 1)
    if pp == 1:
        return
    try:
        check_pipeline(cfg.model_spec(), pp)
    except ConfigError as err:
        raise ValueError(str(err)) from None
    dep = getattr(cfg, "deployment", None)
    if dep is not None and getattr(dep, "mode", None) == "disagg":
        raise ValueError(
            "pipeline_parallel_size: disaggregated pools over pipeline stages are not modelled "
            "(the KV transfer and the pools' GPUs assume one stage); set "
            "--pipeline-parallel-size 1"
        )
    if getattr(cfg, "speculative", None) is not None:
        raise ValueError(
            "pipeline_parallel_size: speculative decoding over pipeline stages is not modelled; "
            "drop --speculative-config, or set --pipeline-parallel-size 1"
        )


def check_engine_only(cfg: Any) -> Any:
    """Engine-only settings need a step model with tables: ``engine``, or ``auto`` where it
    resolves to them (:mod:`tidal.hardware.auto_perf`); also run on each deployment pool's
    effective config (``sim/deployment.py``)."""
    check_pipeline_config(cfg)
    if cfg.perf_model == "engine":
        return cfg

    choice = engine_choice(cfg, cfg.data_parallel_size, cfg.moe_tp_size)
    try:
        if cfg.perf_model == "auto":
            check_auto_engine_settings(cfg.model_spec(), get_gpu(cfg.gpu), cfg.tp, choice)
            return cfg
        keys = engine_only_settings(choice)
        if keys:
            raise refuse_engine_only(keys, f"perf_model {cfg.perf_model} has none")
    except ConfigError as err:
        raise ValueError(str(err)) from None
    return cfg
