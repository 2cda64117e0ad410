"""Fixtures of the workload tests: the shared traces (skipped when absent) and tiny files."""

from __future__ import annotations

from pathlib import Path

import pytest

from tidal.core.errors import ConfigError
from tidal.workload.paths import traces_dir

from .helpers import azure_rows, write


@pytest.fixture(scope="session")
def traces() -> Path:
    try:
        return traces_dir()
    except ConfigError:
        pytest.skip("shared/traces not found (set TIDAL_TRACES_DIR)")


@pytest.fixture
def five_azure(tmp_path: Path) -> Path:
    """Arrivals at 0, 1, 2.5, 4 and 10 s; prompts 10…50; outputs 5…9."""
    return write(
        tmp_path / "five.csv",
        azure_rows(
            [
                ("10:00:00.0000000", 10, 5),
                ("10:00:01.0000000", 20, 6),
                ("10:00:02.5000000", 30, 7),
                ("10:00:04.0000000", 40, 8),
                ("10:00:10.0000000", 50, 9),
            ]
        ),
    )
