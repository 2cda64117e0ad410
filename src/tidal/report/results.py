"""Re-exports :mod:`tidal.experiments.results` (a run's on-disk layout lives in ``experiments``)."""

from tidal.experiments.results import _clean, summary_dict, write_run

__all__ = ["_clean", "summary_dict", "write_run"]
