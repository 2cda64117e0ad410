"""``bench/silicon_disagg.py``: the silicon sample's disaggregated rows → deployment plans or
grouped skips, and one shrunken row run end to end."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import silicon_disagg as sd
import silicon_disagg_rows as sdr
import silicon_rows as sr

from tidal.sim.config import load_config

FIELDS = sr.config_fields()
POOL_FIELDS = sdr.pool_fields()
ROW = sr.Row(
    "x", "db-dump; silicon_concurrency=8", "sglang", "0.5.8", "deepseek-ai/DeepSeek-V3",
    "b200_sxm", "fp8", "fp8", "fp8_block", 8192, 1024, 8, 8, 1, 1, 8, 1, 500.0, 10.0,
)  # fmt: skip
PRE = sdr.Pool(workers=1, tp=8, attention_dp=1, moe_tp=8, moe_ep=1, batch=1)
DEC = sdr.Pool(workers=2, tp=8, attention_dp=1, moe_tp=8, moe_ep=1, batch=4)


def drow(pre: sdr.Pool = PRE, dec: sdr.Pool = DEC, **kw: object) -> sdr.DisaggRow:
    return sdr.DisaggRow(dataclasses.replace(ROW, **kw), pre, dec, True)  # type: ignore[arg-type]


def plan(d: sdr.DisaggRow) -> sr.Plan | sr.Skip:
    return sdr.plan_disagg_row(d, FIELDS, POOL_FIELDS)


@pytest.fixture(scope="module")
def rows() -> list[sdr.DisaggRow]:
    return sdr.read_disagg_rows(sr.sample_path())


def test_the_sample_holds_551_disaggregated_rows_118_with_worker_counts(
    rows: list[sdr.DisaggRow],
) -> None:
    assert len(rows) == 551
    known = [d for d in rows if d.prefill.workers is not None]
    assert len(known) == 118
    # the batch sizes are per attention-DP rank: their product is the recorded concurrency
    for d in known:
        if d.concurrency_recorded:
            q = d.decode
            assert q.batch is not None
            assert q.workers is not None
            assert q.batch * q.workers * q.attention_dp == d.row.concurrency, d.row.id


def test_a_row_becomes_a_loadable_deployment() -> None:
    p = plan(drow())
    assert isinstance(p, sr.Plan)
    cfg = load_config(p.config)
    dep = cfg.deployment
    assert dep is not None
    assert dep.disaggregated
    assert (dep.prefill.instances, dep.prefill.tp, dep.decode.instances, dep.decode.tp) == (
        1, 8, 2, 8)  # fmt: skip
    assert dep.decode.scheduler == {"max_seqs": 4}  # the row's decode batch size
    assert dep.kv_transfer.protocol == "push"  # SGLang's Mooncake connector
    assert (cfg.engine, cfg.engine_version, cfg.perf_model) == ("sglang", "0.5.8", "engine")
    assert (cfg.workload.concurrency, cfg.workload.num_requests) == (8, 80)
    assert cfg.gpu == "b200"
    vllm = plan(drow(engine="vllm", version="0.19.0"))
    assert isinstance(vllm, sr.Plan)
    assert vllm.config["deployment"]["kv_transfer"]["protocol"] == "pull"


def test_rows_carry_their_serving_paths_overhead_unless_told_none() -> None:
    cfg = load_config(plan(drow()).config)  # type: ignore[union-attr]
    assert cfg.deployment is not None
    assert cfg.deployment.request_overhead_ms == "dynamo"  # the rows were served by Dynamo
    none = sdr.plan_disagg_row(drow(), FIELDS, POOL_FIELDS, request_overhead="0")
    assert isinstance(none, sr.Plan)
    assert "request_overhead_ms" not in none.config["deployment"]  # older code runs it too
    assert sd.parse([]).request_overhead == "dynamo"


def test_a_shared_dp_ep_layout_is_the_base_configs() -> None:
    pool = sdr.Pool(1, 1, 8, 1, 8, 16)
    p = plan(drow(pre=pool, dec=pool, tp=1, attention_dp=8, moe_tp=1, moe_ep=8))
    assert isinstance(p, sr.Plan)
    assert p.config["data_parallel_size"] == 8
    assert p.config["enable_expert_parallel"] is True
    assert "data_parallel_size" not in p.config["deployment"]["decode"]


def test_per_pool_dp_ep_layouts_are_set_on_the_pools() -> None:
    from tidal.sim.deployment import pool_config

    pre = sdr.Pool(1, 1, 8, 1, 8, 1)  # prefill TP 1 × attention DP 8, EP 8; decode TP 8
    p = plan(drow(pre, DEC))
    assert isinstance(p, sr.Plan), p
    dep = p.config["deployment"]
    assert (dep["prefill"]["data_parallel_size"], dep["prefill"]["enable_expert_parallel"]) == (
        8, True)  # fmt: skip
    assert "data_parallel_size" not in dep["decode"]
    assert "data_parallel_size" not in p.config
    cfg = load_config(p.config)
    pc, dc = pool_config(cfg, "prefill"), pool_config(cfg, "decode")
    assert (pc.tp, pc.data_parallel_size, pc.enable_expert_parallel) == (1, 8, True)
    assert (dc.tp, dc.data_parallel_size, dc.enable_expert_parallel) == (8, 1, False)


@pytest.mark.parametrize(
    ("pre", "dec", "group", "words"),
    [
        (dataclasses.replace(PRE, workers=None), DEC, "pd-unknown", "worker counts"),
        (PRE, sdr.Pool(1, 1, 32, 1, 32, 256), "parallelism", "32 GPUs"),
        (PRE, sdr.Pool(1, 16, 1, 16, 1, 64), "parallelism", "cross-node TP"),
        (sdr.Pool(1, 1, 8, 1, 8, 1), DEC, "parallelism", "per-pool"),
    ],
)
def test_skips_name_their_obstacle(pre: sdr.Pool, dec: sdr.Pool, group: str, words: str) -> None:
    p = sdr.plan_disagg_row(drow(pre, dec), FIELDS, POOL_FIELDS - set(sdr.POOL_KEYS))
    assert isinstance(p, sr.Skip)
    assert (p.group, words in p.reason) == (group, True), p.reason


def test_the_unrecorded_concurrency_is_the_decode_pools_batch(rows: list[sdr.DisaggRow]) -> None:
    gap = [d for d in rows if not d.concurrency_recorded]
    assert len(gap) == 7  # NVIDIA's gap-analysis Qwen3 rows
    d = gap[0]
    assert d.row.concurrency == (d.decode.batch or 0) * (d.decode.workers or 0)
    p = plan(d)
    assert isinstance(p, sr.Plan)
    assert any("not recorded" in n for n in p.notes)


def test_a_shrunken_row_runs_and_a_failing_one_is_reported() -> None:
    small = sdr.Pool(1, 1, 1, 1, 1, 2)
    d = sdr.DisaggRow(
        dataclasses.replace(ROW, engine="vllm", version="", model="Qwen/Qwen3-8B",
                            system="h100_sxm", gemm_quant="", moe_quant="", precision="bf16",
                            isl=256, osl=8, concurrency=2, tp=1, moe_tp=1),
        small, small, True,
    )  # fmt: skip
    p = plan(d)
    assert isinstance(p, sr.Plan)
    res = sd.run_disagg_plan((p, 0.8, 0, 0))
    assert res["status"] == "ok", res
    assert res["ttft_side"] == "client"
    assert res["sim_ttft_ms"] > 0
    assert res["sim_tpot_ms"] > 0
    assert res["kv_transfer_bytes"] > 0
    p.config["deployment"]["decode"]["tp"] = 3  # 32 heads do not split over 3 GPUs
    bad = sd.run_disagg_plan((p, 0.8, 0, 0))
    assert bad["status"] in ("config", "error")
    assert "tp" in bad["reason"]


def test_kimi_rows_are_priced_at_their_own_dtypes() -> None:
    kimi = drow(model="moonshotai/Kimi-K2.5", engine="vllm", version="0.18.0", system="gb200",
                gemm_quant="nvfp4", moe_quant="nvfp4")  # fmt: skip
    p = plan(kimi)
    assert isinstance(p, sr.Plan)
    assert (p.config["gemm_quant"], p.config["moe_quant"]) == ("nvfp4", "nvfp4")
    # issue 28's rule, for comparison: same width as the checkpoint's INT4 experts → theirs
    quant, _ = sr.precision_settings(kimi.row, FIELDS, False, "moonshotai/Kimi-K2.5", True)
    assert "moe_quant" not in quant


def test_blackwell_sglang_deepseek_rows_run_the_recipes_fp8_kv_cache() -> None:
    """The SGLang DeepSeek-R1 recipes of the B200 / GB200 / GB300 rows set
    ``kv-cache-dtype: fp8_e4m3`` on both pools; H200's and vLLM's rows keep their own rule."""
    for system in ("b200_sxm", "gb200", "gb300"):
        p = plan(drow(system=system))
        assert isinstance(p, sr.Plan)
        assert p.config["kv_cache_dtype"] == "fp8"
        assert load_config(p.config).model_spec().kv_cache_dtype.startswith("fp8")
    h200 = plan(drow(system="h200_sxm"))
    assert isinstance(h200, sr.Plan)
    assert "kv_cache_dtype" not in h200.config


def test_aic_command_line_and_who_the_silicon_agrees_with() -> None:
    import aic_compare

    tries = aic_compare.aic_argv(drow(), moe=True)
    first = tries[0]
    assert first[:2] == ["cli", "estimate"]
    assert first[first.index("--estimate-mode") + 1] == "disagg"
    assert first[first.index("--decode-num-workers") + 1] == "2"
    assert first[first.index("--decode-batch-size") + 1] == "4"
    assert first[first.index("--prefill-moe-ep-size") + 1] == "1"  # MoE: always a layout
    assert first[first.index("--backend-version") + 1] == "0.5.8"
    assert "--backend-version" not in tries[1]  # then AIConfigurator's default version
    assert "--prefill-moe-ep-size" not in aic_compare.aic_argv(drow(), moe=False)[0]
    rec = {"silicon_ttft_ms": 100.0, "tidal_ttft_ms": 90.0, "aic_ttft_ms": 50.0,
           "silicon_tpot_ms": 10.0, "tidal_tpot_ms": 10.5, "aic_tpot_ms": 10.0}  # fmt: skip
    out = aic_compare.compare(rec)
    assert out["ttft_closer"] == "tidal"
    assert "tpot_closer" not in out  # within 10 % of each other: no verdict
    assert out["aic_ttft_err"] == pytest.approx(-0.5)
