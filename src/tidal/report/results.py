"""The on-disk layout of one run's results.

``DIR/summary.json``  config, seed, tidal version and metrics — byte-identical for the same
                      config and seed (no wall-clock figures, no output path);
``DIR/requests.parquet``  one row per request;
``DIR/run.json``      wall-clock time and event counts (varies between runs).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import tidal
from tidal.report.io import write_json, write_parquet


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
    return _clean(out)


def write_run(
    out_dir: str | Path,
    config: dict[str, Any],
    seed: int,
    metrics: dict[str, Any],
    columns: dict[str, Any],
    run_info: dict[str, Any],
    extra_tables: dict[str, dict[str, Any]] | None = None,
    extra_json: dict[str, Any] | None = None,
    extra_summary: dict[str, Any] | None = None,
) -> Path:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_parquet(out / "requests.parquet", columns)
    for name, table in (extra_tables or {}).items():
        write_parquet(out / f"{name}.parquet", table)
    for name, obj in (extra_json or {}).items():
        write_json(out / f"{name}.json", _clean(obj))
    write_json(out / "run.json", _clean(run_info))
    write_json(out / "summary.json", summary_dict(config, seed, metrics, extra_summary))
    return out
