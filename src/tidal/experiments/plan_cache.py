"""A plan's simulations on disk as they finish, so that an interrupted ``tidal plan`` resumes.

Layout under the plan's output directory::

    DIR/simulations/<key>.json      one evaluation: its key document, verdict (passed, stopped
                                    early) and metrics — written as soon as it is known
    DIR/simulations/<key>.run/      the run directory of a deployment that entered the top list
                                    (summary.json, requests.parquet, …), copied to DIR/runs/

``key`` is a SHA-256 prefix of everything the simulation depends on: the option's full config
(workload and seed included), the capacity, the early stop, the router, the capacity key and
template, the SLO targets and a digest of the request set. A record counts only when its stored
key document equals the one asked for (like a sweep cell's ``summary.json``), so a changed
config, trace or SLO is simulated again. A rerun of the same ``tidal plan`` replays the
recorded verdicts — the search is deterministic, so it asks for the same simulations in the
same order — and simulates only what is missing: the same plan, reusing the work done.
Metrics are stored with NaN as JSON allows, so a replayed verdict is the verdict.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from tidal.core.io import atomic_write
from tidal.experiments.space import PlanSpec
from tidal.sim.config import SimulationConfig
from tidal.workload.base import RequestSet

SIMS_DIR = "simulations"


def requests_digest(requests: RequestSet) -> str:
    """SHA-256 of the request set's arrivals and lengths (what every simulation replays)."""
    h = hashlib.sha256()
    for arr in (requests.arrival_ns, requests.prompt_len, requests.output_len):
        h.update(np.ascontiguousarray(arr, dtype=np.int64).tobytes())
    return h.hexdigest()


def _plain(v: Any) -> Any:
    if isinstance(v, np.generic):
        return v.item()
    raise TypeError(f"not JSON: {type(v).__name__}")


class PlanCache:
    """Evaluations and winning run directories of one plan directory."""

    def __init__(
        self, out_dir: str | Path, spec: PlanSpec, targets: dict[str, float], requests: RequestSet
    ) -> None:
        self.dir = Path(out_dir) / SIMS_DIR
        self._common = {
            "router": spec.router,
            "capacity_key": spec.capacity_key,
            "capacity_template": spec.capacity_template,
            "targets": targets,
            "requests": requests_digest(requests),
        }
        self.reused = 0
        self.stored = 0

    def _key(
        self, cfg: SimulationConfig, capacity: int, early_stop: bool | None
    ) -> tuple[str, str]:
        doc = {
            **self._common,
            "config": cfg.model_dump(mode="json"),
            "capacity": capacity,
            "early_stop": early_stop,
        }
        text = json.dumps(doc, sort_keys=True, default=_plain)
        return hashlib.sha256(text.encode()).hexdigest()[:20], text

    def load(self, cfg: SimulationConfig, capacity: int, early_stop: bool) -> dict[str, Any] | None:
        """The recorded ``{"passed", "stopped_early", "metrics"}``, or None."""
        key, text = self._key(cfg, capacity, early_stop)
        try:
            rec = json.loads((self.dir / f"{key}.json").read_text())
        except (OSError, ValueError):
            return None
        if json.dumps(rec.get("key"), sort_keys=True) != text:
            return None
        self.reused += 1
        return dict(rec)

    def store(
        self,
        cfg: SimulationConfig,
        capacity: int,
        early_stop: bool,
        passed: bool,
        stopped_early: bool,
        metrics: dict[str, Any],
    ) -> None:
        key, text = self._key(cfg, capacity, early_stop)
        rec = {
            "key": json.loads(text),
            "passed": passed,
            "stopped_early": stopped_early,
            "metrics": metrics,
        }
        body = json.dumps(rec, sort_keys=True, default=_plain) + "\n"
        self.dir.mkdir(parents=True, exist_ok=True)
        atomic_write(self.dir / f"{key}.json", lambda p: p.write_text(body))
        self.stored += 1

    def run_dir(self, cfg: SimulationConfig, capacity: int) -> Path:
        """Where the run directory of (config, capacity) is kept (a passing run is the same
        with or without the early stop)."""
        return self.dir / f"{self._key(cfg, capacity, None)[0]}.run"

    def has_run(self, cfg: SimulationConfig, capacity: int) -> bool:
        return (self.run_dir(cfg, capacity) / "summary.json").is_file()


def copy_run(src: Path, dst: Path) -> None:
    """``dst`` becomes a copy of the run directory ``src`` (hard links where the file system
    allows: the files are never modified in place)."""
    if dst.exists():
        shutil.rmtree(dst)
    dst.parent.mkdir(parents=True, exist_ok=True)

    def link(a: str, b: str) -> Any:
        try:
            os.link(a, b)
            return b
        except OSError:
            return shutil.copy2(a, b)

    shutil.copytree(src, dst, copy_function=link)
