"""``tidal profile-gpu`` in its CPU mode: tiny shapes, the file loads back through the
``tidal-gpu-profile/1`` loader, and the attention it times is the runtime's, checked against
dense attention."""

from __future__ import annotations

import json
import math

import pytest
import torch
from typer.testing import CliRunner

from tidal.cli import app
from tidal.cli.profile_gpu import catalog_gpu
from tidal.core.errors import ConfigError
from tidal.hardware.models import get_model
from tidal.hardware.opprofile import LAYER_OPS, deployment, load_profile
from tidal.runtime import opprofiler as op
from tidal.runtime.attention import decode_attention

runner = CliRunner()
TINY = get_model("tiny-llama")  # 8 q heads, 2 KV heads of 32, h 256, I 768, V 512


def _profile(path, *args: str) -> None:
    res = runner.invoke(
        app, ["profile-gpu", "--model", "tiny-llama", "--device", "cpu", "--out", str(path),
              "--warmup", "1", "--reps", "3", "--threads", "1", *args],
    )  # fmt: skip
    assert res.exit_code == 0, res.output


def test_cpu_profile_loads_back_as_a_deployment(tmp_path):
    path = tmp_path / "p.json.gz"
    _profile(path)
    prof = load_profile(path)
    assert (prof.gpu, prof.source) == ("cpu", op.SOURCE)
    dep = deployment("cpu", "tiny-llama", 1, profiles=(prof,), heads=(8, 2, 32))
    assert dep is not None
    assert dep.attention is not None
    g = op.TINY_GRIDS
    assert dep.linear.tokens == list(g.tokens)
    assert set(dep.linear.layer_us) == set(LAYER_OPS)
    assert set(dep.linear.step_us) == {"emb", "lm_head"}
    assert all(v > 0 for col in dep.linear.layer_us.values() for v in col)
    dec, pre = dep.attention.decode, dep.attention.prefill
    assert dec is not None
    assert pre is not None
    assert (dec.rows, dec.cols) == (list(g.decode_batch), list(g.decode_ctx))
    assert (pre.rows, pre.cols) == (list(g.prefill_chunk), list(g.prefill_ctx))
    # cells beyond max_decode_tokens context tokens are not measured
    for b, row in zip(dec.rows, dec.us, strict=True):
        for c, v in zip(dec.cols, row, strict=True):
            assert (v is None) == (b * c > g.max_decode_tokens)
    assert all(v is not None and v > 0 for row in pre.us for v in row)


def test_a_second_run_merges_into_the_file(tmp_path):
    path = tmp_path / "p.json"
    _profile(path)
    _profile(path, "--tp", "2")
    prof = load_profile(path)
    assert sorted((x.model, x.tp) for x in prof.linear) == [("tiny-llama", 1), ("tiny-llama", 2)]
    shapes = sorted((a.q_heads, a.kv_heads, a.head_dim) for a in prof.attention)
    assert shapes == [(4, 1, 32), (8, 2, 32)]
    _profile(path)  # the same key again replaces, not duplicates
    assert len(load_profile(path).linear) == 2


def test_bad_options_fail_cleanly(tmp_path):
    res = runner.invoke(app, ["profile-gpu", "--device", "cpu", "--grid", "huge", "--out",
                              str(tmp_path / "x.json")])  # fmt: skip
    assert res.exit_code == 2
    assert "grid" in res.output
    assert not (tmp_path / "x.json").exists()
    res = runner.invoke(app, ["profile-gpu", "--model", "qwen3-30b-a3b", "--device", "cpu",
                              "--out", str(tmp_path / "x.json")])  # fmt: skip
    assert res.exit_code == 2
    assert "mixture of experts" in res.output


def test_shards_follow_tensor_parallelism():
    s = op.Shard.of(get_model("llama-3.1-8b"), 2)
    assert (s.q_heads, s.kv_heads, s.inter, s.vocab) == (16, 4, 7168, 64128)
    assert op.Shard.of(get_model("llama-3.1-8b"), 16).kv_heads == 1  # replicated KV head
    with pytest.raises(ConfigError, match="not divisible"):
        op.Shard.of(get_model("llama-3.1-8b"), 3)


def test_timer_runs_warmup_then_reps_and_takes_the_median():
    calls = []
    timer = op.OpTimer(torch.device("cpu"), warmup=2, reps=5)
    assert timer(lambda: calls.append(1)) >= 0
    assert len(calls) == 7


def test_the_decode_it_times_is_paged_attention_over_each_request_context():
    """The profiler's decode segment (scattered blocks, partial last block) fed to the
    runtime's kernel equals dense softmax attention over each request's own tokens."""
    s = op.Shard.of(TINY, 1)
    b, ctx, bs = 3, 37, 16
    per = math.ceil(ctx / bs)
    perm = torch.randperm(b * per + 5, generator=torch.Generator().manual_seed(3))
    k_cache, v_cache = op._kv_cache(s, b * per + 5, bs, torch.device("cpu"), torch.float32)
    seg = op._decode_segment(b, ctx, bs, perm, torch.device("cpu"))
    q = torch.randn(b, s.q_heads, s.head_dim)
    got = decode_attention(q, k_cache, v_cache, seg, 0.2)
    group = s.q_heads // s.kv_heads
    for r in range(b):
        blocks = perm[r * per : (r + 1) * per]
        k = k_cache[blocks].transpose(0, 1).reshape(s.kv_heads, -1, s.head_dim)[:, :ctx]
        v = v_cache[blocks].transpose(0, 1).reshape(s.kv_heads, -1, s.head_dim)[:, :ctx]
        k, v = k.repeat_interleave(group, 0), v.repeat_interleave(group, 0)
        ref = torch.softmax((q[r].unsqueeze(1) @ k.transpose(1, 2)) * 0.2, -1) @ v
        torch.testing.assert_close(got[r], ref.squeeze(1), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("name", "gpu"),
    [("NVIDIA H200", "h200"), ("NVIDIA H100 80GB HBM3", "h100"),
     ("NVIDIA A100-SXM4-80GB", "a100-80gb"), ("NVIDIA GeForce RTX 4090", None)],
)  # fmt: skip
def test_device_names_map_to_the_catalog(name, gpu):
    assert catalog_gpu(name) == gpu


def test_the_profile_drives_the_measured_perf_model(tmp_path):
    """Written as h100 data (shapes timed on this CPU), the file is a ``measured:PATH`` perf
    model: its layer time at a grid point is L·Σ ops + emb, a pure decode step at a grid cell
    adds L·(the decode cell), and a simulation names the profile as its source."""
    from tidal.hardware.calibration import build_perf_model
    from tidal.hardware.gpus import get_gpu

    path = tmp_path / "h100-cpu.json"
    _profile(path, "--gpu", "h100")
    lin, attn = load_profile(path).linear[0], load_profile(path).attention[0]
    perf = build_perf_model(f"measured:{path}", TINY, get_gpu("h100"), 1)
    assert perf.source == "measured:tidal profile-gpu/h100/tiny-llama/tp1"
    L, i = TINY.num_layers, lin.tokens.index(4)
    layer = sum(col[i] for col in lin.layer_us.values())
    expect_tok = (L * layer + lin.step_us["emb"][i]) * 1e-6
    assert perf.kernel_seconds(4, 4 * 16, 0, attention=False) == pytest.approx(expect_tok)
    assert attn.decode is not None
    cell = attn.decode.us[attn.decode.rows.index(4)][attn.decode.cols.index(16)]
    assert cell is not None
    got = perf.kernel_seconds(4, 4 * 16, 0)
    assert got == pytest.approx(expect_tok + L * cell * 1e-6)
    out = tmp_path / "run"
    res = runner.invoke(
        app, ["simulate", "--model", "tiny-llama", "--gpu", "h100", "--perf-model",
              f"measured:{path}", "--num-requests", "20", "--rate", "5", "--prompt-len", "32",
              "--output-len", "8", "--out", str(out)],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["metrics"]["perf_model_source"] == perf.source
