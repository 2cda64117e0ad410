"""What data backs each GPU and model of the catalogs (``tidal gpus``, ``tidal models``).

Step times come, per (model, GPU, TP), from the first that exists of (``--perf-model auto``,
:mod:`tidal.hardware.auto_perf`): the engine's measured operator tables (per
GPU: ``tidal gpus`` lists them apart), a paper's measured linear constants
(:data:`~tidal.hardware.calibration.CALIBRATIONS`), the bundled per-operator GPU profiles
(``tidal/data/profiles``, Vidur's public measurements), else the corrected roofline — which
needs only the spec sheet. This module lists, for each catalog entry, the deployments with a
calibration or a profile (``auto-vidur``'s order, without the tables)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from tidal.hardware.calibration import CALIBRATIONS
from tidal.hardware.gpus import GPUS
from tidal.hardware.models import MODELS
from tidal.hardware.opprofile import bundled_profiles


@dataclass
class Backing:
    """The measured data behind one GPU (by model) or one model (by GPU)."""

    measured: dict[str, list[int]] = field(default_factory=dict)
    """Peer name → tensor-parallel degrees with bundled operator profiles."""
    measured_source: set[str] = field(default_factory=set)
    calibrated: dict[str, list[tuple[int, str]]] = field(default_factory=dict)
    """Peer name → (TP, citation) of a paper's calibrated constants."""

    def describe(self) -> str:
        """One line: ``calibrated: …; measured (vidur): …``, or the roofline fallback."""
        parts = []
        if self.calibrated:
            items = [
                f"{peer} TP{tp} ({src.split(' ')[0]})"
                for peer, rows in sorted(self.calibrated.items())
                for tp, src in rows
            ]
            parts.append("paper calibration: " + ", ".join(items))
        if self.measured:
            items = [f"{peer} {_tps(tps)}" for peer, tps in sorted(self.measured.items())]
            src = "/".join(sorted(self.measured_source))
            parts.append(f"measured profiles ({src}): " + ", ".join(items))
        return "; ".join(parts) if parts else "corrected roofline only (spec sheet)"


def _tps(tps: list[int]) -> str:
    return "TP" + "/".join(str(t) for t in sorted(tps))


def backing() -> tuple[dict[str, Backing], dict[str, Backing]]:
    """(by GPU, by model): what measured data each catalog entry has."""
    gpus: dict[str, Backing] = defaultdict(Backing)
    models: dict[str, Backing] = defaultdict(Backing)
    for prof in bundled_profiles():
        for lin in prof.linear:
            for own, peer, table in ((prof.gpu, lin.model, gpus), (lin.model, prof.gpu, models)):
                b = table[own]
                b.measured.setdefault(peer, []).append(lin.tp)
                b.measured_source.add(prof.source)
    for (model, gpu, tp), cal in CALIBRATIONS.items():
        gpus[gpu].calibrated.setdefault(model, []).append((tp, cal.source))
        models[model].calibrated.setdefault(gpu, []).append((tp, cal.source))
    return (
        {name: gpus[name] for name in GPUS},
        {name: models[name] for name in MODELS},
    )
