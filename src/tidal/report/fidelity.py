"""Re-exports :mod:`tidal.experiments.fidelity_metrics` (per-request simulator errors)."""

from tidal.experiments.fidelity_metrics import (
    METRICS,
    fidelity_summary,
    mean_columns,
    relative_errors,
)

__all__ = ["METRICS", "fidelity_summary", "mean_columns", "relative_errors"]
