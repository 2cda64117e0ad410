"""The host term: vLLM v1's by default (fitted on other models' EB constants), or Vidur's."""

from __future__ import annotations

import pytest

from tidal.core.errors import ConfigError
from tidal.hardware.calibration import CALIBRATIONS, build_perf_model
from tidal.hardware.corrected import CorrectedRooflinePerfModel, bundled_constants
from tidal.hardware.gpus import get_gpu
from tidal.hardware.measured import MeasuredPerfModel
from tidal.hardware.models import get_model


def test_default_host_is_vllm_v1_and_vidur_stays_selectable() -> None:
    m, g = get_model("llama-3.1-8b"), get_gpu("h100")
    c = bundled_constants()
    v1 = CorrectedRooflinePerfModel(m, g)
    vid = CorrectedRooflinePerfModel(m, g, host="vidur")
    h, hv = c.hosts["vllm-v1"], c.host
    assert v1.host_s(100) == pytest.approx((h.step_us + 100 * h.per_seq_us) * 1e-6)
    assert vid.host_s(100) == pytest.approx((hv.step_us + 100 * hv.per_seq_us) * 1e-6)
    # vLLM v1's per-sequence host cost is a fraction of the old engine's
    assert h.per_seq_us < 0.5 * hv.per_seq_us
    assert build_perf_model("corrected", m, g).describe()["host"] == "vllm-v1"
    assert build_perf_model("corrected", m, g, host="vidur").describe()["host"] == "vidur"
    with pytest.raises(ConfigError, match="perf_host"):
        build_perf_model("auto", m, g, host="sglang")


def test_measured_model_uses_vidur_host_times_only_when_asked() -> None:
    a100, m = get_gpu("a100-80gb"), get_model("llama-2-7b")
    vid = build_perf_model("measured", m, a100, host="vidur")
    v1 = build_perf_model("measured", m, a100)
    assert isinstance(vid, MeasuredPerfModel)
    assert isinstance(v1, MeasuredPerfModel)
    assert vid.parts["host"].startswith("measured:")
    assert v1.parts["host"] == "corrected-roofline"
    # same kernels; only the per-sequence part of the step differs
    assert v1.tokens_s(256) == vid.tokens_s(256)
    assert v1.seqs_s(256) == pytest.approx(v1.fb.head_s(256) + v1.fb.host_s(256))
    assert v1.step_ns(256, 256 * 1024) < vid.step_ns(256, 256 * 1024)


@pytest.mark.parametrize("gpu", ["h200", "rtx-pro-6000"])
def test_marginal_decode_cost_matches_the_held_out_eb_measurement(gpu: str) -> None:
    """Qwen3-8B was not in the host fit: the corrected roofline's cost of one more decode
    request at 512 context (kernels + LM head + host, between 256 and 1024 requests) is
    within 25 % of the EB paper's measured β_d (45.9 µs on H200, 103.9 µs on RTX PRO 6000:
    55.2 and 107.1 µs with 128-row GEMM tiles, 53.8 and 106.6 with 64); with Vidur's host
    term farther off."""
    m, g = get_model("qwen3-8b"), get_gpu(gpu)
    beta_d = CALIBRATIONS[("qwen3-8b", gpu, 1)].beta_d

    def slope(host: str) -> float:
        p = CorrectedRooflinePerfModel(m, g, host=host)
        return (p.step_seconds(1024, 1024 * 512, 0, 0, 0, 0)
                - p.step_seconds(256, 256 * 512, 0, 0, 0, 0)) / 768  # fmt: skip

    assert slope("vllm-v1") == pytest.approx(beta_d, rel=0.25)
    assert abs(slope("vidur") / beta_d - 1) > abs(slope("vllm-v1") / beta_d - 1)


def test_perf_host_config_key_reaches_the_simulation() -> None:
    """``perf_host: vidur`` charges the older engine's host time: the same run is slower."""
    from tidal.sim.config import load_config
    from tidal.sim.run import run_simulation

    def tpot(host: str) -> float:
        cfg = load_config({
            "model": "llama-3.1-8b", "gpu": "h100", "perf_model": "corrected-roofline",
            "perf_host": host, "seed": 3,
            "workload": {"num_requests": 40, "rate": 20.0, "prompt_len": 256, "output_len": 32},
        })  # fmt: skip
        return float(run_simulation(cfg).metrics["tpot_mean_s"])

    assert tpot("vidur") > tpot("vllm-v1")
    with pytest.raises(ConfigError):
        load_config({"perf_host": "sglang", "workload": {"num_requests": 1, "rate": 1.0}})
