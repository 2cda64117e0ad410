"""Precision as a planner axis (issue 28, item 7): ``search: {quantization: [...]}`` expands
the options, each option's precision sets its weight bytes in the memory check, and a
precision whose GEMM rows the GPU's measured tables lack (NVFP4 on H100) is reported, not run."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidal.core.errors import ConfigError
from tidal.experiments.plan_options import build_options
from tidal.experiments.plan_precision import resolve_precision
from tidal.experiments.space import load_plan_spec

FIXED = {
    "scheduler.batching": ["mb"],
    "scheduler.ordering": ["fcfs"],
    "scheduler.token_budget": [2048],
    "scheduler.max_seqs": [128],
}


def _spec(search: dict, model: str = "llama-3.1-8b"):
    return load_plan_spec(
        {
            "base": {"model": model, "workload": {"num_requests": 20, "rate": 1.0}},
            "search": {**FIXED, **search},
            "slo": {"ttft_p99_s": 2.0},
        }
    )


def test_the_precision_axis_multiplies_the_options_and_names_each_precision() -> None:
    # 2 GPUs × 2 TP degrees × 3 precisions × 1 of each scheduler axis = 12 options
    spec = _spec({"gpu": ["h100", "b200"], "tp": [1, 2], "quantization": ["bf16", "fp8",
                                                                          "modelopt_fp4"]})
    opts = build_options(spec, 4096)
    assert len(opts) == 12
    by = {(o.config.gpu, o.config.tp, o.values["quantization"]): o for o in opts}
    assert len(by) == 12
    names = {"bf16": "bf16", "fp8": "fp8", "modelopt_fp4": "nvfp4"}
    for (_, _, q), o in by.items():
        assert o.precision == names[q]
        assert o.label.endswith(f"· {names[q]}")


def test_a_precision_without_tables_is_reported_and_never_run() -> None:
    spec = _spec({"gpu": ["h100", "b200"], "tp": [1], "quantization": ["fp8", "modelopt_fp4"]})
    opts = {(o.config.gpu, o.values["quantization"]): o for o in build_options(spec, 4096)}
    bad = opts[("h100", "modelopt_fp4")]
    assert bad.status == "no-tables"
    assert "no nvfp4 GEMM" in bad.error
    assert "h100" in bad.error
    assert "fp8" in bad.error  # what the tables do hold
    for key in [("h100", "fp8"), ("b200", "fp8"), ("b200", "modelopt_fp4")]:
        assert opts[key].error is None
        assert opts[key].status is None


def test_fp8_halves_the_linear_weights_in_the_memory_check() -> None:
    """Llama-3.1-8B at TP1: bf16 holds 2 bytes × 8,030,261,248 parameters; FP8 stores every
    linear layer in 1 byte and keeps the embeddings, LM head and norms (N parameters) in bf16:
    P + N bytes, N = 2·128256·4096 (untied embeddings and LM head) + (2·32 + 1)·4096."""
    spec = _spec({"gpu": ["h100"], "tp": [1], "quantization": ["bf16", "fp8"]})
    opts = {o.values["quantization"]: o for o in build_options(spec, 4096)}
    params = 8_030_261_248
    n_bf16 = 2 * 128256 * 4096 + (2 * 32 + 1) * 4096
    assert opts["bf16"].weights_gib * 2**30 == pytest.approx(2 * params, rel=1e-9)
    assert opts["fp8"].weights_gib * 2**30 == pytest.approx(params + n_bf16, rel=1e-9)
    kv = {o.values["quantization"]: o.config for o in build_options(spec, 4096)}
    assert kv["bf16"].model_spec().gemm_quant == "bfloat16"
    assert kv["fp8"].model_spec().gemm_quant == "fp8"


@pytest.mark.parametrize("value", ["bf16", "BF16", "bfloat16", "none"])
def test_bf16_means_the_unquantized_weights_even_of_a_quantized_checkpoint(value) -> None:
    data = resolve_precision({"quantization": value, "moe_quant": "nvfp4"})
    assert data == {"quantization": None, "gemm_quant": "bfloat16", "moe_quant": "nvfp4"}
    assert resolve_precision({"quantization": "auto"}) == {"quantization": None}
    assert resolve_precision({"quantization": "fp8"}) == {"quantization": "fp8"}


def test_an_unknown_precision_on_the_axis_is_refused_by_name() -> None:
    with pytest.raises(ConfigError, match=r"search\.quantization.*'fp3'.*modelopt_fp4.*bf16"):
        _spec({"quantization": ["fp8", "fp3"]}).axes()
    with pytest.raises(ConfigError, match=r"search\.kv_cache_dtype.*'int2'"):
        _spec({"kv_cache_dtype": ["fp8", "int2"]}).axes()


def test_a_kv_cache_dtype_axis_shows_in_the_precision() -> None:
    spec = _spec({"gpu": ["h100"], "tp": [1], "kv_cache_dtype": ["auto", "fp8"]})
    opts = {o.values["kv_cache_dtype"]: o for o in build_options(spec, 4096)}
    assert opts["auto"].precision == "bf16"
    assert opts["fp8"].precision == "bf16 · KV fp8"
    assert opts["fp8"].weights_gib == opts["auto"].weights_gib


@settings(max_examples=12, deadline=None)
@given(
    gpus=st.lists(st.sampled_from(["h100", "b200", "h200"]), min_size=1, max_size=3, unique=True),
    precisions=st.lists(
        st.sampled_from(["bf16", "fp8", "modelopt_fp4", "auto"]), min_size=1, max_size=4,
        unique=True,
    ),
)
def test_every_gpu_and_precision_is_one_option_refused_only_for_missing_fp4_rows(
    gpus, precisions
) -> None:
    """|options| = |gpus| × |precisions|; only NVFP4 off Blackwell is refused (the H100 and
    H200 tables hold no nvfp4 GEMM rows, B200's do)."""
    opts = build_options(_spec({"gpu": gpus, "tp": [1], "quantization": precisions}), 4096)
    assert len(opts) == len(gpus) * len(precisions)
    for o in opts:
        fp4_off_blackwell = o.values["quantization"] == "modelopt_fp4" and o.config.gpu != "b200"
        assert (o.status == "no-tables") == fp4_off_blackwell, (o.label, o.error)


def test_one_bf16_value_in_the_base_serves_a_quantized_checkpoint_unquantized() -> None:
    """``tidal plan --quantization bf16`` (one value: the base) on the FP8 release of
    Qwen3-30B-A3B: every option deploys bf16 weights, twice the FP8 checkpoint's."""
    def weights(q: str) -> tuple[str, float | None]:
        spec = load_plan_spec({
            "base": {"model": "Qwen/Qwen3-30B-A3B-FP8", "quantization": q,
                     "workload": {"num_requests": 20, "rate": 1.0}},
            "search": {**FIXED, "gpu": ["h100"], "tp": [1]},
            "slo": {"ttft_p99_s": 2.0},
        })  # fmt: skip
        (opt,) = build_options(spec, 4096)
        assert opt.error is None
        return opt.precision, opt.weights_gib

    (p16, w16), (p8, w8) = weights("bf16"), weights("auto")
    assert (p16, p8) == ("bf16", "fp8 (block)")
    assert 1.8 < w16 / w8 < 2.0  # the embeddings and LM head are bf16 in both
