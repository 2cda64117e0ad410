"""The on-disk layout of one run's results.

``DIR/summary.json``  config, seed, tidal version and metrics — byte-identical for the same
                      config and seed (no wall-clock figures, no output path);
``DIR/requests.parquet``  one row per request;
``DIR/run.json``      wall-clock time and event counts (varies between runs).

A run directory is written whole: a re-run replaces it (see :func:`write_run`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import tidal
from tidal.core.io import replacing_dir, write_json, write_parquet


def _clean(x: Any) -> Any:
    """JSON-safe: NaN/inf → None, numpy scalars → Python."""
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_clean(v) for v in x]
    if hasattr(x, "item") and not isinstance(x, str | bytes):
        x = x.item()
    if isinstance(x, float) and (math.isnan(x) or math.isinf(x)):
        return None
    return x


def summary_dict(
    config: dict[str, Any],
    seed: int,
    metrics: dict[str, Any],
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    out = {"config": config, "seed": seed, "tidal_version": tidal.__version__, "metrics": metrics}
    out.update(extra or {})
    cleaned = _clean(out)
    cleaned["config"] = _config_values(config)
    return cleaned


def _config_values(x: Any) -> Any:
    """A config as JSON that re-runs to the same result: an infinite value (``rate: inf``)
    is written ``"inf"``, which the config reads back as infinity (JSON has no infinity, and
    ``null`` would mean "unset"). A validated config holds no NaN."""
    if isinstance(x, dict):
        return {k: _config_values(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_config_values(v) for v in x]
    if isinstance(x, float) and math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return _clean(x)


def write_run(
    out_dir: str | Path,
    config: dict[str, Any],
    seed: int,
    metrics: dict[str, Any],
    columns: Mapping[str, Any],
    run_info: dict[str, Any],
    extra_tables: dict[str, dict[str, Any]] | None = None,
    extra_json: dict[str, Any] | None = None,
    extra_summary: dict[str, Any] | None = None,
    *,
    atomic: bool = True,
) -> Path:
    """Write one run's files. With ``atomic`` the directory is replaced as a whole
    (:func:`tidal.core.io.replacing_dir`): never the summary of one run beside the requests
    of another. ``atomic=False`` writes into ``out_dir`` directly (a caller's own temporary
    directory)."""
    out = Path(out_dir)
    if atomic:
        with replacing_dir(out) as tmp:
            _write_files(
                tmp,
                config,
                seed,
                metrics,
                columns,
                run_info,
                extra_tables,
                extra_json,
                extra_summary,
            )
        return out
    out.mkdir(parents=True, exist_ok=True)
    _write_files(
        out, config, seed, metrics, columns, run_info, extra_tables, extra_json, extra_summary
    )
    return out


def _write_files(
    out: Path,
    config: dict[str, Any],
    seed: int,
    metrics: dict[str, Any],
    columns: Mapping[str, Any],
    run_info: dict[str, Any],
    extra_tables: dict[str, dict[str, Any]] | None,
    extra_json: dict[str, Any] | None,
    extra_summary: dict[str, Any] | None,
) -> None:
    write_parquet(out / "requests.parquet", columns)
    for name, table in (extra_tables or {}).items():
        write_parquet(out / f"{name}.parquet", table)
    for name, obj in (extra_json or {}).items():
        write_json(out / f"{name}.json", _clean(obj))
    write_json(out / "run.json", _clean(run_info))
    write_json(out / "summary.json", summary_dict(config, seed, metrics, extra_summary))
