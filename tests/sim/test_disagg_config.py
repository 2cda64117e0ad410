"""The ``deployment`` section and its flags: a disaggregated deployment is validated per pool
and every error names the field (and the flag that set it)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from tidal.cli import app
from tidal.core.errors import ConfigError
from tidal.hardware.gpus import get_gpu
from tidal.sim.config import load_config
from tidal.sim.deployment import pool_config
from tidal.sim.engine_defaults import sglang_mem_fraction_static

SYNTH = {"num_requests": 4, "rate": 10.0, "prompt_len": 64, "output_len": 8}


def _load(deployment: object, **over: object):
    data = {"workload": dict(SYNTH), "deployment": deployment, **over}
    return load_config(data)


def test_no_section_is_one_pool():
    cfg = load_config({"workload": dict(SYNTH)})
    assert cfg.deployment is None


def test_a_pool_implies_disagg_and_pools_override_the_base():
    cfg = _load(
        {
            "prefill": {"instances": 2, "tp": 2, "gpu": "h200"},
            "decode": {"tp": 4, "gpu": "b200", "scheduler": {"max_seqs": 64}},
        },
        tp=1,
    )
    assert cfg.deployment is not None
    assert cfg.deployment.disaggregated
    p, d = pool_config(cfg, "prefill"), pool_config(cfg, "decode")
    assert (p.gpu, p.tp, p.deployment) == ("h200", 2, None)
    assert (d.gpu, d.tp, d.scheduler.max_seqs) == ("b200", 4, 64)
    assert d.scheduler.token_budget == cfg.scheduler.token_budget  # merged, not replaced
    assert cfg.deployment.prefill.instances == 2
    assert cfg.deployment.decode.instances == 1


@pytest.mark.parametrize(
    ("deployment", "match"),
    [
        ({"decode": {"tp": 3}}, r"deployment\.decode\.tp: .*3"),
        ({"prefill": {"tp": 0}}, r"deployment\.prefill\.tp"),
        ({"decode": {"instances": 0}}, r"deployment\.decode\.instances"),
        ({"prefill": {"gpu": "h900"}}, r"deployment\.prefill\.gpu: .*h900"),
        ({"decode": {"scheduler": {"max_seqs": True}}}, r"deployment\.decode\.scheduler\.max_seqs"),
        ({"decode": {"memory": {"block_sise": 16}}}, r"deployment\.decode\.memory\.block_sise"),
        ({"decode": {"scheduler": {"batching": "eb"}}}, r"deployment\.decode\.scheduler\.batching"),
        ({"kv_transfer": {"link": "token-ring"}}, r"deployment\.kv_transfer\.link.*ib-ndr"),
        ({"kv_transfer": {"efficiency": 1.5}}, r"deployment\.kv_transfer\.efficiency"),
        ({"kv_transfer": {"overlap": "layerwise"}}, r"deployment\.kv_transfer\.overlap"),
        ({"kv_transfer": {"protocol": "rdma"}}, r"deployment\.kv_transfer\.protocol"),
        ({"router": "random"}, r"deployment\.router.*least-loaded"),
        ({"prefill": {"nodes": 2}}, r"deployment\.prefill\.nodes"),
        ({"mode": "agg", "decode": {"tp": 2}}, r"deployment\.mode: agg"),
    ],
)
def test_errors_name_the_field(deployment, match):
    with pytest.raises(ConfigError, match=match):
        _load(deployment)


def test_a_deployment_with_a_warmup_is_refused_by_name():
    with pytest.raises(ConfigError, match=r"workload\.warmup_requests"):
        _load({"decode": {"tp": 1}}, workload={**SYNTH, "warmup_requests": 2})


runner = CliRunner()


def test_pool_flags_imply_disagg_and_name_the_flag_in_errors(monkeypatch):
    res = runner.invoke(
        app,
        ["simulate", "--num-requests", "2", "--rate", "1", "--decode-tp", "3"],
    )
    assert res.exit_code == 2, res.output
    assert "deployment.decode.tp (--decode-tp)" in " ".join(res.output.split())


def test_cli_run_writes_the_transfer_columns_and_bytes(tmp_path):
    import json

    import polars as pl

    out = tmp_path / "run"
    argv = [
        "simulate", "--prefill-instances", "1", "--decode-instances", "2", "--num-requests",
        "6", "--rate", "20", "--prompt-len", "300", "--output-len", "5", "--perf-model",
        "roofline", "--kv-link", "roce-400", "--out", str(out),
    ]  # fmt: skip
    res = runner.invoke(app, argv)
    assert res.exit_code == 0, res.output
    assert "TTFT breakdown" in res.output
    df = pl.read_parquet(out / "requests.parquet")
    for col in ("kv_transfer_start_ns", "kv_transfer_end_ns", "prefill_start_ns",
                "decode_instance", "kv_transfer_bytes"):  # fmt: skip
        assert col in df.columns
    assert (df["kv_transfer_end_ns"] > df["kv_transfer_start_ns"]).all()
    summary = json.loads((out / "summary.json").read_text())["metrics"]
    assert summary["kv_transfer_bytes"] == int(df["kv_transfer_bytes"].sum()) > 0
    assert summary["kv_link"] == "roce-400"
    assert summary["num_gpus"] == 3


def test_agg_run_has_no_transfer_columns(tmp_path):
    import polars as pl

    out = tmp_path / "agg"
    argv = ["simulate", "--num-requests", "3", "--rate", "20", "--prompt-len", "100",
            "--output-len", "4", "--perf-model", "roofline", "--out", str(out)]  # fmt: skip
    assert runner.invoke(app, argv).exit_code == 0
    assert "kv_transfer_start_ns" not in pl.read_parquet(out / "requests.parquet").columns


def test_the_heterogeneous_example_loads():
    from pathlib import Path

    from tidal.sim.config import load_yaml

    path = Path(__file__).parents[2] / "docs/examples/disagg-h200-b200.yaml"
    cfg = load_config(load_yaml(path))
    assert cfg.deployment is not None
    assert (pool_config(cfg, "prefill").gpu, pool_config(cfg, "decode").gpu) == ("h200", "b200")


SPEC = {"method": "eagle3", "num_speculative_tokens": 3, "acceptance_rate": 0.7}


def test_parallel_engine_and_speculation_keys_override_the_base_per_pool():
    cfg = _load(
        {
            "prefill": {"enable_expert_parallel": True, "engine_version": "0.10.0"},
            "decode": {"data_parallel_size": 2, "moe_tp_size": 1, "engine": "sglang",
                       "speculative": SPEC},
        },
        tp=1,
    )
    p, d = pool_config(cfg, "prefill"), pool_config(cfg, "decode")
    assert (p.enable_expert_parallel, p.engine_version, p.data_parallel_size) == (
        True, "0.10.0", 1)  # fmt: skip
    assert (d.enable_expert_parallel, d.engine_version) == (False, None)  # the base's
    assert (d.data_parallel_size, d.moe_tp_size, d.engine) == (2, 1, "sglang")
    # an engine other than the base's brings its scheduler defaults (SGLang: prefill-first)
    assert (p.scheduler.batching, d.scheduler.batching) == ("mb", "prefill-first")
    # and SGLang's static memory fraction for the pool's GPUs (SGLang's tp: tp · dp = 2)
    assert p.memory.mem_fraction_static is None
    assert d.memory.mem_fraction_static == sglang_mem_fraction_static(
        get_gpu(d.gpu).mem_bytes, 2, d.scheduler.token_budget, dp=2
    )
    assert d.speculative is not None
    assert d.speculative.num_speculative_tokens == 3
    assert p.speculative is None


def test_a_base_speculative_is_the_decode_pools_only():
    cfg = _load({"decode": {}}, speculative=SPEC)
    assert pool_config(cfg, "prefill").speculative is None
    d = pool_config(cfg, "decode").speculative
    assert d is not None
    assert d.method == "eagle3"
    # a JSON string, as vLLM's --speculative-config takes it, is accepted in a pool too
    cfg = _load({"decode": {"speculative_config": '{"method": "ngram", '
                 '"num_speculative_tokens": 2, "acceptance_rate": 0.5}'}})  # fmt: skip
    d = pool_config(cfg, "decode").speculative
    assert d is not None
    assert (d.method, d.num_speculative_tokens) == ("ngram", 2)


@pytest.mark.parametrize(
    ("deployment", "over", "match"),
    [
        ({"prefill": {"speculative": SPEC}}, {}, r"deployment\.prefill\.speculative: .*decode"),
        ({"decode": {"speculative": {"method": "medusa", "num_speculative_tokens": 2}}}, {},
         r"deployment\.decode\.speculative"),
        ({"decode": {"speculative": "{not json"}}, {}, r"deployment\.decode\.speculative"),
        ({"decode": {"moe_tp_size": 3, "tp": 2}}, {}, r"deployment\.decode\.moe_tp_size: 3"),
        ({"decode": {"data_parallel_size": 0}}, {}, r"deployment\.decode\.data_parallel_size"),
        ({"decode": {"engine": "trtllm"}}, {}, r"deployment\.decode\.engine"),
        ({"prefill": {"data_parallel_size": 2}}, {"perf_model": "roofline"},
         r"deployment\.prefill\.data_parallel_size: .*engine tables"),
        ({"decode": {"engine_version": "0.10.0"}}, {"perf_model": "roofline"},
         r"deployment\.decode\.engine_version: .*engine tables"),
        ({"decode": {"enable_expert_parallel": True}}, {"perf_model": "corrected-roofline"},
         r"deployment\.decode\.enable_expert_parallel: .*engine tables"),
    ],
)  # fmt: skip
def test_pool_parallel_and_speculation_errors_name_the_field(deployment, over, match):
    with pytest.raises(ConfigError, match=match):
        _load(deployment, **over)
