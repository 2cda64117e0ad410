"""``--perf-model auto`` (issue 28): the engine's measured tables > a paper's calibration >
the Vidur profiles > the corrected roofline; ``auto-vidur`` keeps the order without the
tables; engine-only settings are accepted where ``auto`` reads tables and refused, naming the
field, where it does not; a version without tables of its own reads the newest ones."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidal.core.errors import ConfigError
from tidal.hardware.calibration import (
    CALIBRATIONS,
    EngineChoice,
    build_perf_model,
    perf_model_source,
    perf_model_tables,
)
from tidal.hardware.engine_data import VERSION_RULE, _pick, resolve_versions, version_key
from tidal.hardware.engine_perf import EnginePerfModel
from tidal.hardware.gpus import get_gpu
from tidal.hardware.models import get_model
from tidal.sim.config import load_config

SHAPES = [(1, 600), (32, 32 * 900), (200, 200 * 1500)]


def _source(kind: str, model: str, gpu: str, tp: int = 1, **kw) -> str:
    return perf_model_source(build_perf_model(kind, get_model(model), get_gpu(gpu), tp, **kw))


def test_the_tables_come_before_a_papers_calibration() -> None:
    """Every calibrated deployment's GPU has tables: ``auto`` reads them; the paper's testbed
    stays ``auto-vidur``'s first choice and what ``linear`` selects."""
    for model, gpu, tp in CALIBRATIONS:
        assert _source("auto", model, gpu, tp).startswith("engine:vllm-"), (model, gpu, tp)
        assert _source("auto-vidur", model, gpu, tp).startswith("calibrated:"), (model, gpu, tp)
        assert _source("linear", model, gpu, tp) == _source("auto-vidur", model, gpu, tp)


def test_the_eager_mode_calibration_is_slower_than_todays_decode() -> None:
    """The EB paper's Qwen3-8B/H200 constants were measured without CUDA graphs: a batch-1
    decode step at its reference context (512) costs α_d + β_d = 8.967 ms there, against the
    tables' graph-captured step, which is what ``auto`` now reports."""
    m, g = get_model("qwen3-8b"), get_gpu("h200")
    cal = CALIBRATIONS[("qwen3-8b", "h200", 1)]
    eager_ns = build_perf_model("linear", m, g).step_ns(1, 512)
    assert eager_ns == round((cal.alpha_d + cal.beta_d) * 1e9)
    assert build_perf_model("auto", m, g).step_ns(1, 512) < 0.7 * eager_ns


def test_the_engine_tables_come_next_and_step_as_perf_model_engine() -> None:
    m, g = get_model("llama-3.1-8b"), get_gpu("h100")
    auto = build_perf_model("auto", m, g)
    engine = build_perf_model("engine", m, g)
    assert isinstance(auto, EnginePerfModel)
    assert perf_model_source(auto) == "engine:vllm-0.24.0/h100_sxm/llama-3.1-8b/tp1"
    assert [auto.step_ns(n, c) for n, c in SHAPES] == [engine.step_ns(n, c) for n, c in SHAPES]
    tables = perf_model_tables(auto)["perf_model_tables"]
    assert tables["engine"] == "vllm"
    assert tables["gpu_tables"] == "h100_sxm"
    assert tables["version_rule"] == VERSION_RULE
    # the same calibrated deployment's GPU without the calibration's exact key: tables
    assert _source("auto", "qwen3-8b", "h200", 2).startswith("engine:vllm-")


def test_the_configured_engine_and_version_select_the_tables() -> None:
    m, g = get_model("qwen3-30b-a3b"), get_gpu("h200")
    sg = build_perf_model("auto", m, g, engine=EngineChoice("sglang"))
    assert perf_model_source(sg).startswith("engine:sglang-")
    old = build_perf_model("auto", m, g, engine=EngineChoice("vllm", "0.19.0"))
    assert perf_model_tables(old)["perf_model_tables"]["tables"]["moe"] == "0.19.0"


def test_without_tables_auto_falls_to_the_vidur_profiles_then_the_roofline() -> None:
    assert _source("auto", "llama-2-7b", "a40").startswith("measured:vidur/a40/")
    assert _source("auto", "llama-3.1-8b", "a40") == "corrected-roofline"
    assert _source("auto", "llama-2-7b", "a40") == _source("auto-vidur", "llama-2-7b", "a40")


def test_auto_vidur_is_the_order_before_issue_28() -> None:
    """Where the GPU has tables ``auto-vidur`` still takes the Vidur profile or the roofline."""
    assert _source("auto-vidur", "llama-2-7b", "a100-80gb").startswith("measured:vidur/")
    assert _source("auto-vidur", "qwen3-8b", "h100") == "corrected-roofline"
    assert _source("auto", "llama-2-7b", "a100-80gb").startswith("engine:vllm-0.14.0/a100_sxm")


def _cfg(**kw):
    return load_config({"workload": {"num_requests": 4, "rate": 1.0}, **kw})


def test_engine_only_settings_pass_with_auto_where_it_reads_tables() -> None:
    cfg = _cfg(model="qwen3-30b-a3b", gpu="h200", tp=2, engine_version="0.19.0",
               enable_expert_parallel=True, data_parallel_size=2)  # fmt: skip
    assert cfg.perf_model == "auto"


@pytest.mark.parametrize(
    ("kw", "field", "fix"),
    [
        ({"model": "qwen3-8b", "gpu": "h200", "engine_version": "0.24.0",
          "perf_model": "auto-vidur"}, "engine_version", "set --perf-model engine"),
        ({"gpu": "a40", "data_parallel_size": 2}, "data_parallel_size", "use a GPU with tables"),
        ({"model": "qwen3-30b-a3b", "gpu": "h100", "tp": 2, "enable_expert_parallel": True,
          "perf_model": "auto-vidur"}, "enable_expert_parallel", "set --perf-model engine"),
        ({"model": "qwen3-30b-a3b", "gpu": "h100", "tp": 2, "moe_tp_size": 1,
          "perf_model": "measured"}, "moe_tp_size", "drop --moe-tp-size"),
    ],
)  # fmt: skip
def test_engine_only_settings_without_tables_are_refused_naming_field_and_fix(kw, field, fix):
    with pytest.raises(ConfigError, match=field) as err:
        _cfg(**kw)
    assert fix in str(err.value)


def test_a_simulation_records_which_model_auto_took() -> None:
    from tidal.sim.run import run_simulation

    wl = {"num_requests": 20, "rate": 10.0, "prompt_len": 200, "output_len": 20}
    res = run_simulation(_cfg(model="llama-3.1-8b", gpu="h100", workload=wl))
    assert res.metrics["perf_model"] == "engine"
    assert res.metrics["perf_model_source"].startswith("engine:vllm-")
    assert res.metrics["perf_model_tables"]["version_rule"] == VERSION_RULE
    pinned = run_simulation(_cfg(model="llama-3.1-8b", gpu="h100", workload=wl,
                                 perf_model="auto-vidur"))  # fmt: skip
    assert pinned.metrics["perf_model_source"] == "corrected-roofline"
    assert "perf_model_tables" not in pinned.metrics


_VERSIONS = st.lists(
    st.tuples(st.integers(0, 1), st.integers(0, 30), st.integers(0, 3)), min_size=1, max_size=6
).map(lambda vs: sorted({".".join(map(str, v)) for v in vs}, key=version_key))


@given(_VERSIONS, st.tuples(st.integers(0, 1), st.integers(0, 30), st.integers(0, 3)))
def test_a_family_reads_the_versions_own_table_else_the_newest(have, want) -> None:
    w = ".".join(map(str, want))
    got = _pick(have, w)
    assert got == (w if w in have else have[-1])


def test_a_version_without_tables_of_its_own_reads_the_newest_tables() -> None:
    """vLLM 0.15.1 on B200 (the silicon sample's gpt-oss rows): once the nearest tables per
    family (0.19.0's slower MXFP4 MoE rows: TPOT 3.7× the measured), now the newest."""
    old = resolve_versions("b200_sxm", "vllm", "0.15.1")
    assert dict(old.families) == dict(resolve_versions("b200_sxm", "vllm").families)
    own = resolve_versions("b200_sxm", "vllm", "0.19.0")  # MoE and comm tables of its own
    assert own.family_version("moe") == "0.19.0"
    assert own.family_version("comm") == "0.19.0"
    newest = resolve_versions("b200_sxm", "vllm").version
    assert own.family_version("attention") == newest  # not 0.22.0, the oldest newer one
