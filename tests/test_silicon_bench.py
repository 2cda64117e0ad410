"""``bench/silicon.py``: the silicon sample's rows → plans or grouped skips, the measuring
client's lengths and metrics, and a failing row reported rather than raised."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import silicon
import silicon_rows as sr

from tidal.sim.config import load_config

BASE = sr.Row(
    "x", "src", "vllm", "0.19.0", "meta-llama/Llama-3.1-70B", "h100_sxm", "bf16", "", "",
    1024, 1024, 16, 4, 1, 1, 4, 1, 100.0, 10.0,
)  # fmt: skip
TODAY = sr.config_fields()
NO_DTYPES = TODAY - {"gemm_quant", "moe_quant"}


def is_70b(name: str) -> bool:
    """The row's model resolved: a catalog alias or the Hugging Face id itself."""
    from tidal.hardware.models import get_model

    return get_model(name).num_layers == 80


def row(**kw: object) -> sr.Row:
    return dataclasses.replace(BASE, **kw)  # type: ignore[arg-type]


def test_the_sample_holds_vllm_and_sglang_aggregated_rows() -> None:
    rows = sr.read_rows(sr.sample_path())
    assert len(rows) > 2000
    assert {r.engine for r in rows} == {"vllm", "sglang"}
    assert all(r.concurrency >= 1 and r.isl >= 1 and r.ttft_ms > 0 for r in rows)


def test_a_bf16_row_of_a_catalog_model_becomes_a_loadable_plan() -> None:
    plan = sr.plan_row(BASE, TODAY)
    assert isinstance(plan, sr.Plan)
    cfg = load_config(plan.config)
    assert is_70b(cfg.model)
    assert (cfg.gpu, cfg.tp) == ("h100", 4)
    assert cfg.workload.concurrency == 16
    assert cfg.workload.num_requests == 160
    assert "memory" not in plan.config  # synthetic lengths carry no content: nothing to cache


@pytest.mark.parametrize(
    ("change", "group"),
    [
        ({"system": "tpu_v5"}, "gpu"),
        ({"model": "org/NotAModel-7B"}, "model"),
        ({"gemm_quant": "fp8", "precision": "fp8"}, "precision"),
        ({"pp": 2}, "parallelism"),
        ({"attention_dp": 2}, "parallelism"),
    ],
)
def test_skips_name_their_first_obstacle(change: dict, group: str) -> None:
    fields = {f for f in NO_DTYPES if f not in {"quantization", "pipeline_parallel_size",
                                                "data_parallel_size"}}  # fmt: skip
    plan = sr.plan_row(row(**change), fields)
    assert isinstance(plan, sr.Skip)
    assert plan.group == group
    assert plan.reason


def test_settings_pass_through_once_the_schema_has_them() -> None:
    fields = NO_DTYPES | {"quantization", "pipeline_parallel_size", "engine", "engine_version"}
    plan = sr.plan_row(row(gemm_quant="nvfp4", pp=2), fields, perf_model="engine")
    assert isinstance(plan, sr.Plan)
    c = plan.config
    assert (c["quantization"], c["pipeline_parallel_size"]) == ("modelopt_fp4", 2)
    assert (c["engine"], c["engine_version"]) == ("vllm", "0.19.0")
    auto = sr.plan_row(row(), fields)  # auto reads the tables too (issue 28): the version
    assert isinstance(auto, sr.Plan)
    assert auto.config["engine_version"] == "0.19.0"
    roof = sr.plan_row(row(), fields, perf_model="corrected-roofline")  # no tables to select
    assert isinstance(roof, sr.Plan)
    assert "engine_version" not in roof.config
    assert "engine" not in sr.plan_row(row(), TODAY - {"engine"}).config  # type: ignore[union-attr]
    # the tables' dtypes directly, where the config has them (moe_quant for MoE models only)
    dtypes = fields | {"gemm_quant", "moe_quant"}
    dense = sr.plan_row(row(gemm_quant="fp8", moe_quant="fp8_block"), dtypes)
    assert isinstance(dense, sr.Plan)
    assert (dense.config["gemm_quant"], "moe_quant" in dense.config) == ("fp8", False)
    moe = sr.plan_row(row(model="Qwen/Qwen3-30B-A3B", gemm_quant="fp8", moe_quant="fp8_block"),
                      dtypes)  # fmt: skip
    assert isinstance(moe, sr.Plan)
    assert (moe.config["gemm_quant"], moe.config["moe_quant"]) == ("fp8", "fp8_block")


def test_moe_columns_matter_only_for_moe_models() -> None:
    dense = sr.plan_row(row(moe_tp=1, moe_ep=4), TODAY - {"enable_expert_parallel"})
    assert isinstance(dense, sr.Plan)  # Llama is dense: its MoE columns are ignored
    moe = row(model="Qwen/Qwen3-30B-A3B", tp=4, moe_tp=1, moe_ep=4)
    skip = sr.plan_row(moe, TODAY - {"enable_expert_parallel"})
    assert isinstance(skip, sr.Skip)
    assert skip.group == "parallelism"
    ep = sr.plan_row(moe, TODAY | {"enable_expert_parallel"})
    assert isinstance(ep, sr.Plan)
    assert ep.config["enable_expert_parallel"] is True
    bad = sr.plan_row(row(model="Qwen/Qwen3-30B-A3B", moe_tp=2, moe_ep=4), TODAY)
    assert isinstance(bad, sr.Skip)
    assert "≠" in bad.reason


def test_client_lengths_are_inferencex_uniform() -> None:
    rng = np.random.default_rng(1)
    x = silicon.client_lengths(1024, 5000, 0.8, rng)
    assert x.min() == int(0.8 * 1024)
    assert x.max() == 1024
    assert (silicon.client_lengths(1024, 7, 0.0, rng) == 1024).all()
    reqs, warm = silicon.client_requests(100, 50, 3, 0.8, 0)
    assert (len(reqs), len(warm)) == (30, 6)
    assert (warm.prompt_len == reqs.prompt_len[0]).all()


def test_client_metrics_follow_vllm_bench() -> None:
    cols = {
        "arrival_ns": np.array([0, 0]),
        "first_token_ns": np.array([10_000_000, 30_000_000]),
        "finish_ns": np.array([100_000_000, 30_000_000]),
        "output_tokens": np.array([10, 1]),
    }
    ttft, tpot = silicon.client_metrics(cols)
    assert ttft == pytest.approx(20.0)
    assert tpot == pytest.approx(10.0)  # (100 − 10) / 9; a one-token answer has no TPOT


def test_a_failing_row_is_reported_not_raised() -> None:
    plan = sr.plan_row(BASE, TODAY)
    assert isinstance(plan, sr.Plan)
    plan.config["tp"] = 3  # 64 heads do not split over 3 GPUs
    res = silicon.run_plan((plan, 0.8, 0, 0))
    assert res["status"] == "config"
    assert "tp" in res["reason"]
    assert silicon.reason_key("needs 9131 tokens on 1× h200") == "needs # tokens on #× h200"


def test_engine_scheduler_defaults_until_the_simulator_has_an_engine_setting() -> None:
    assert sr.scheduler_defaults("vllm", "h100", 16) == {"token_budget": 8192, "max_seqs": 16}
    assert sr.scheduler_defaults("vllm", "a100-80gb", 16)["token_budget"] == 2048
    assert sr.scheduler_defaults("sglang", "h200", 16) == {"token_budget": 8192, "max_seqs": 256}
    assert sr.scheduler_defaults("sglang", "b200", 512) == {"token_budget": 16384, "max_seqs": 512}
    plan = sr.plan_row(row(engine="sglang"), TODAY - {"engine", "engine_version"})
    assert isinstance(plan, sr.Plan)
    assert plan.config["scheduler"]["max_seqs"] == 256
    with_engine = sr.plan_row(row(), TODAY | {"engine"})
    assert isinstance(with_engine, sr.Plan)
    assert with_engine.config["scheduler"] == {"max_seqs": 16}  # the engine's own budget


def test_a_refused_engine_version_falls_back_to_the_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import tidal.sim.config as config
    from tidal.core.errors import ConfigError

    real = config.load_config

    def strict(data: dict) -> object:
        if "engine_version" in data:
            raise ConfigError("engine_version", f"no tables of {data['engine_version']}")
        return real(data)

    monkeypatch.setattr(config, "load_config", strict)
    plan = sr.plan_row(BASE, TODAY)
    assert isinstance(plan, sr.Plan)
    cfg, note = silicon.load_or_default_version({**plan.config, "engine_version": "nightly"})
    assert is_70b(cfg.model)
    assert "nightly" in note
    plain = {k: v for k, v in plan.config.items() if k != "engine_version"}
    assert silicon.load_or_default_version(plain)[1] == ""


def test_a_quantized_checkpoint_of_the_same_width_keeps_its_dtypes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """gpt-oss's MXFP4 experts stay MXFP4 under the sample's "nvfp4" label; an FP8 row of a
    bf16 checkpoint, or an NVFP4 row of a block-FP8 one, sets the row's dtypes."""
    assert [sr.dtype_bits(d) for d in ("", "bfloat16", "fp8_block", "nvfp4", "int4_wo")] == [
        16, 16, 8, 4, 4]  # fmt: skip
    assert sr.dtype_bits("w4a16_mxfp4") == 4
    fields = TODAY | {"gemm_quant", "moe_quant"}
    moe = row(model="Qwen/Qwen3-30B-A3B", gemm_quant="nvfp4", moe_quant="nvfp4")
    ckpt = {"now": ("bfloat16", "w4a16_mxfp4")}  # the resolved model's checkpoint
    monkeypatch.setattr(sr, "checkpoint_dtypes", lambda m: ckpt["now"])
    kept = sr.plan_row(moe, fields)
    assert isinstance(kept, sr.Plan)
    assert "moe_quant" not in kept.config
    assert "gemm_quant" not in kept.config
    ckpt["now"] = ("fp8_block", "fp8_block")
    fp4 = sr.plan_row(moe, fields)
    assert isinstance(fp4, sr.Plan)
    assert (fp4.config["gemm_quant"], fp4.config["moe_quant"]) == ("nvfp4", "nvfp4")
    assert "moe_quant" not in sr.plan_row(  # type: ignore[union-attr]
        dataclasses.replace(moe, gemm_quant="fp8", moe_quant="fp8"), fields
    ).config


def test_the_fixed_length_source_shows_the_lockstep_split_the_others_do_not() -> None:
    """The evidence for ``FIXED_LENGTH_SOURCES``, from the sample alone: at the same Qwen3-32B
    H100 points, SGLang 0.5.1's requests live as long as vLLM 0.12's (same work) while its TTFT
    is several times longer and its TPOT shorter (cohorts prefilled apart from decode steps)."""
    rows = sr.read_rows(sr.sample_path())

    def points(pred: object) -> dict[tuple[int, int, int, int], sr.Row]:
        return {(r.tp, r.isl, r.osl, r.concurrency): r for r in rows if pred(r)}  # type: ignore[operator]

    fixed = points(lambda r: sr.source_client_ratio(r) == 0.0 and r.model == "Qwen/Qwen3-32B")
    other = points(
        lambda r: r.model == "Qwen/Qwen3-32B" and r.engine == "vllm"
        and "gap-analysis" in r.source and sr.source_client_ratio(r) is None
    )  # fmt: skip
    both = sorted(fixed.keys() & other.keys())
    assert len(both) >= 30

    def life(r: sr.Row) -> float:
        return r.ttft_ms + (r.osl - 1) * r.tpot_ms

    life_ratio = np.median([life(fixed[k]) / life(other[k]) for k in both])
    ttft_ratio = np.median([fixed[k].ttft_ms / other[k].ttft_ms for k in both])
    tpot_ratio = np.median([fixed[k].tpot_ms / other[k].tpot_ms for k in both])
    assert 0.9 < life_ratio < 1.1
    assert ttft_ratio > 3.0
    assert tpot_ratio < 0.85


def test_the_qwen3_235b_sglang_rows_show_two_clients_prefilled_together() -> None:
    """The evidence for the SGLang 0.5.6.post2 Qwen3-235B-A22B-FP8 source, from its rows: at TP 2,
    C = 2, ISL 4000 TTFT and TPOT do not move with OSL (100 → 2000). With re-sends spread over
    the cycle, the other client's prompt (one prefill, at least half of the measured TTFT)
    would land in a 100-token request's decode with the decode share of its lifetime as
    probability, adding that share × TTFT/2 / (OSL − 1) to its TPOT: ≥ 10 % here, where the
    rows show less than a third of it (a cohort: both prefilled, then both decoding)."""
    src = sr.FIXED_LENGTH_SOURCES[1]
    rows = [r for r in sr.read_rows(sr.sample_path()) if src in r.source]
    assert rows
    assert all(sr.source_client_ratio(r) == 0.0 for r in rows)
    pair = {r.osl: r for r in rows if (r.tp, r.concurrency, r.isl) == (2, 2, 4000)}
    assert sorted(pair) == [100, 500, 1000, 2000]
    ttfts = [r.ttft_ms for r in pair.values()]
    assert max(ttfts) / min(ttfts) < 1.02
    short, long_ = pair[100], pair[2000]
    decode = (short.osl - 1) * short.tpot_ms
    decode_share = decode / (short.ttft_ms + decode)
    spread_extra = decode_share * (short.ttft_ms / 2) / (short.osl - 1)
    assert spread_extra / long_.tpot_ms > 0.10
    assert short.tpot_ms - long_.tpot_ms < spread_extra / 3
    llama = [r for r in sr.read_rows(sr.sample_path()) if "Llama-3.1-8B" in r.source
             and "sglang/0.5.6.post2" in r.source]  # fmt: skip
    assert len(llama) == 46
    assert all(sr.source_client_ratio(r) is None for r in llama)


def test_the_llama_sglang_rows_cannot_be_cohorts_prefilled_before_any_decode() -> None:
    """Why the SGLang 0.5.6.post2 Llama-3.1-8B rows keep the spread client although the gap
    analysis's template sends fixed lengths (docs/design/sglang_rows.md): a prefill-first
    engine under a fixed-length loop prefills each cohort of C prompts before any of them
    decodes, so the mean TTFT is at least half the cohort's prefill, C · ISL · 2 · 8.03 GFLOP
    at H200's full dense FP8 rate (1,979 TFLOP/s a GPU). For 19 of the 46 rows that bound is
    above the measured TTFT: the engine mixed prefills into decode steps (SGLang's
    ``--enable-mixed-chunk``, which AIConfigurator's generator sets), which Tidal's SGLang
    model (prefill-first) does not express with its per-step prefill cap."""
    rows = [r for r in sr.read_rows(sr.sample_path())
            if "meta-llama_Llama-3.1-8B-Instruct.csv" in r.source]  # fmt: skip
    assert len(rows) == 46

    def cohort_floor_ms(r: sr.Row) -> float:
        return 0.5 * r.concurrency * r.isl * 2 * 8.03e9 / (r.tp * 1979e12) * 1e3

    assert sum(cohort_floor_ms(r) > r.ttft_ms for r in rows) == 19


def test_an_override_replaces_keys_and_merges_one_level_into_mappings() -> None:
    plan = sr.plan_row(BASE, TODAY)
    assert isinstance(plan, sr.Plan)
    before = dict(plan.config["scheduler"])
    silicon.apply_override(plan, {"scheduler": {"batching": "mb"}, "tp": 8})
    assert plan.config["scheduler"] == {**before, "batching": "mb"}
    assert plan.config["tp"] == 8
    assert plan.notes[-1] == 'override {"scheduler": {"batching": "mb"}, "tp": 8}'
    assert load_config(plan.config).scheduler.batching == "mb"


def test_the_prefill_cap_what_if_sets_each_sglang_rows_isl_plus_n() -> None:
    row = dataclasses.replace(BASE, engine="sglang", version="0.5.6.post2", isl=4000)
    plan = sr.plan_row(row, TODAY)
    assert isinstance(plan, sr.Plan)
    silicon.apply_max_prefill_isl_plus(plan, 1500)
    cfg = load_config(plan.config)
    assert cfg.scheduler.max_prefill_tokens == 5500
    assert (cfg.scheduler.batching, cfg.scheduler.options["max_prefill_tokens"]) == ("sglang", 5500)
    vllm = sr.plan_row(BASE, TODAY)
    assert isinstance(vllm, sr.Plan)
    silicon.apply_max_prefill_isl_plus(vllm, 1500)
    assert load_config(vllm.config).scheduler.max_prefill_tokens is None


def test_a_source_that_fixes_the_client_overrides_the_range_ratio() -> None:
    src = sr.FIXED_LENGTH_SOURCES[0]
    plan = sr.plan_row(row(source=f"source_file=/x/{src}Qwen_Qwen3-32B.csv", engine="sglang"),
                       TODAY)  # fmt: skip
    assert isinstance(plan, sr.Plan)
    assert plan.client_ratio == 0.0
    assert silicon.plan_ratio(plan, 0.8) == 0.0
    assert "range ratio 0" in plan.notes[-1]
    assert silicon.plan_ratio(plan, 0.8, by_source=False) == 0.8
    other = sr.plan_row(BASE, TODAY)
    assert isinstance(other, sr.Plan)
    assert silicon.plan_ratio(other, 0.8) == 0.8


def test_a_modelopt_checkpoint_gets_its_fp8_kv_cache_where_the_version_honours_it() -> None:
    """nvidia/MiniMax-M2.5-NVFP4 asks for an FP8 KV cache (``kv_cache_quant_algo``); vLLM
    applies it under ``--kv-cache-dtype auto`` from 0.13 on, nightly builds too."""
    mm = row(model="MiniMaxAI/MiniMax-M2.5", precision="fp4", gemm_quant="nvfp4",
             moe_quant="nvfp4", tp=4, moe_tp=4)  # fmt: skip
    assert sr.kv_settings(dataclasses.replace(mm, version="0.19.0"), TODAY) == {
        "kv_cache_dtype": "fp8"
    }
    assert sr.kv_settings(dataclasses.replace(mm, version="nightly-abc"), TODAY) != {}
    assert sr.kv_settings(dataclasses.replace(mm, version="0.12.0"), TODAY) == {}
    assert sr.kv_settings(dataclasses.replace(mm, engine="sglang"), TODAY) == {}
    assert sr.kv_settings(dataclasses.replace(mm, gemm_quant="fp8_block"), TODAY) == {}
    assert sr.kv_settings(mm, TODAY - {"kv_cache_dtype"}) == {}
    plan = sr.plan_row(dataclasses.replace(mm, version="0.19.0"), TODAY, "engine")
    assert isinstance(plan, sr.Plan)
    assert load_config(plan.config).model_spec().kv_cache_dtype == "fp8"
