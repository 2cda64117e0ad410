"""Re-exports :mod:`tidal.core.io` (atomic writes live below ``experiments``)."""

from tidal.core.io import atomic_write, check_run_dir, replacing_dir, write_json, write_parquet

__all__ = ["atomic_write", "check_run_dir", "replacing_dir", "write_json", "write_parquet"]
