"""``tidal fidelity --measured DIR``: the simulator against a run measured elsewhere; the logic
lives in :mod:`tidal.experiments.fidelity_measured` (re-exported here)."""

from tidal.experiments.fidelity_measured import measured_requests_path, run_measured_fidelity

__all__ = ["measured_requests_path", "run_measured_fidelity"]
