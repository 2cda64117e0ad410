"""The ``deployment`` section and its flags: a disaggregated deployment is validated per pool
and every error names the field (and the flag that set it)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from tidal.cli import app
from tidal.core.errors import ConfigError
from tidal.sim.config import load_config
from tidal.sim.deployment import pool_config

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
