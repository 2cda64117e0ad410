"""A content hash of a run's results, for exactness checks across code changes.

SHA-256 over, in a fixed order: every per-request column (name, dtype, shape, bytes), the
metrics as canonical JSON (sorted keys, floats by ``repr``, so equal digests mean bit-equal
floats), a cluster run's per-model metrics and its result tables. Wall-clock figures
(``run_info``) are left out: they differ between identical runs.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

import numpy as np

from tidal.core.spool import ColumnSet


def _canon(x: Any) -> Any:
    if isinstance(x, dict):
        return {str(k): _canon(v) for k, v in sorted(x.items())}
    if isinstance(x, list | tuple):
        return [_canon(v) for v in x]
    if isinstance(x, np.integer | np.floating):
        x = x.item()
    if isinstance(x, float):
        return repr(x)
    return x


def _arrays(h: Any, cols: Mapping[str, np.ndarray]) -> None:
    for k in sorted(cols):
        if isinstance(cols, ColumnSet):  # streamed: the same bytes, a chunk at a time
            h.update(f"{k}:{cols.dtype(k).str}:{(cols.num_rows,)}".encode())
            for part in cols.chunks(k):
                h.update(np.ascontiguousarray(part).tobytes())
            continue
        a = np.ascontiguousarray(cols[k])
        h.update(f"{k}:{a.dtype.str}:{a.shape}".encode())
        h.update(a.tobytes())


def result_digest(res: Any) -> str:
    """Hex digest of a :class:`tidal.sim.run.SimResult` (module docstring)."""
    h = hashlib.sha256()
    _arrays(h, res.columns)
    h.update(json.dumps(_canon(res.metrics)).encode())
    summary = res.extras.get("summary") or {}
    if "per_model" in summary:
        h.update(json.dumps(_canon(summary["per_model"])).encode())
    tables = res.extras.get("tables") or {}
    for name in sorted(tables):
        h.update(name.encode())
        _arrays(h, tables[name])
    return h.hexdigest()
