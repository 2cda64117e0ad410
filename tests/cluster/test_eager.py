"""The eager-mode per-step overhead (a sensitivity setting): one constant per step, exact on
vectorised decode runs, growing with the tensor-parallel degree as MuxServe's profile does."""

from __future__ import annotations

import numpy as np
import pytest

from tidal.cluster.eager import EAGER_OVERHEAD_MS, EagerPerfModel, eager_overhead_s
from tidal.hardware.calibration import build_perf_model
from tidal.hardware.gpus import get_gpu
from tidal.hardware.models import get_model


def test_overhead_table_lookup_and_growth_with_degree():
    assert eager_overhead_s(get_model("llama-2-7b"), 1) == pytest.approx(3.3e-3)
    assert eager_overhead_s(get_model("llama-2-13b"), 2) == pytest.approx(6.7e-3)
    assert eager_overhead_s(get_model("llama-2-70b"), 4) == pytest.approx(11.8e-3)
    assert eager_overhead_s(get_model("llama-2-70b"), 2) == pytest.approx(11.8e-3)  # nearest
    for row in EAGER_OVERHEAD_MS.values():
        values = [row[k] for k in sorted(row)]
        assert values == sorted(values)  # more GPUs, more launch and all-reduce latency


def test_eager_model_adds_the_constant_and_keeps_decode_runs_exact():
    base = build_perf_model("roofline", get_model("llama-2-7b"), get_gpu("h100"), 4)
    perf = EagerPerfModel(base, 9.5e-3)
    assert perf.step_seconds(8, 8000, 0, 0, 0, 0) == base.step_seconds(8, 8000, 0, 0, 0, 0) + 9.5e-3
    run = perf.decode_run_ns(16, 12345, 50)
    one_by_one = [perf.step_ns(16, 12345 + 16 * i) for i in range(50)]
    np.testing.assert_array_equal(run, one_by_one)
    with pytest.raises(ValueError, match="overhead"):
        EagerPerfModel(base, -1.0)
