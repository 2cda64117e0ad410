"""``empirical:sharegpt`` is what its help says: the 8k-filtered ShareGPT table (whole
conversations), mean 2,340 prompt / 439 output tokens — not vLLM's ~200/200 first-turn set."""

from __future__ import annotations

import pytest

from tidal.cli.flags import LENGTHS
from tidal.workload.lengths import length_table


def test_the_sharegpt_table_matches_its_documented_means() -> None:
    prompt, output = length_table("sharegpt")
    assert len(prompt) == 30_731
    assert prompt.mean() == pytest.approx(2340, abs=1)
    assert output.mean() == pytest.approx(439, abs=1)
    assert (prompt + output).max() <= 8192
    assert output.max() <= 1024
    help_text = next(f.help for f in LENGTHS if f.name == "length_dist")
    assert "2,340 prompt / 439 output" in help_text
    assert "not vLLM's first-turn ShareGPT" in help_text
