"""Pipeline parallelism (``--pipeline-parallel-size``): the round's time against TP-only stage
times worked by hand, the per-stage KV plan, pp = 1 unchanged, exact fast-forward, refusals."""

from __future__ import annotations

import dataclasses
from functools import lru_cache

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import make_scheduler, request_set, simulate
from tidal.core.errors import ConfigError
from tidal.hardware.calibration import EngineChoice, build_perf_model, perf_model_source
from tidal.hardware.engine_perf import EnginePerfModel
from tidal.hardware.engine_tables import nccl_us
from tidal.hardware.gpus import GIB, get_gpu
from tidal.hardware.interp import Curve
from tidal.hardware.memory import plan_memory
from tidal.hardware.models import get_model
from tidal.hardware.perf import PerfModel
from tidal.hardware.pipeline import PipelinePerfModel, stage_layers
from tidal.sim.config import load_config

M70, H100 = get_model("llama-3.1-70b"), get_gpu("h100")


@lru_cache(maxsize=4)
def tp_only(tp: int = 4) -> EnginePerfModel:
    return EnginePerfModel(M70, H100, tp)


@lru_cache(maxsize=8)
def piped(tp: int, pp: int) -> PerfModel:
    return build_perf_model("engine", M70, H100, tp, engine=EngineChoice(pipeline=pp))


def send_by_hand(tokens: int, tp: int) -> float:
    """A 2-GPU exchange of the rank's slice of hidden states + residual, then the receiving
    stage's all-gather of the whole tensors over its TP ranks (NCCL rows, µs → s)."""
    whole = 2 * tokens * M70.hidden_size * 2  # two bf16 tensors [tokens, hidden]
    pair = nccl_us("h100_sxm", "all_gather", 2)
    gather = nccl_us("h100_sxm", "all_gather", tp)
    assert pair is not None
    assert gather is not None
    return (Curve(*pair).at(whole / tp) + Curve(*gather).at(whole)) * 1e-6


@pytest.mark.parametrize("pp", [2, 4])
def test_a_full_round_is_one_micro_batch_of_n_over_p_plus_p_minus_1_sends(pp: int) -> None:
    n, ctx = 64, 64 * 1500  # 64 decodes of 1500 tokens: p micro-batches of 64/p
    got = piped(4, pp).step_seconds(n, ctx, 0, 0, 0, 0)
    mb = n // pp
    want = tp_only().step_seconds(mb, ctx * (mb / n), 0, 0, 0, 0) + (pp - 1) * send_by_hand(mb, 4)
    assert got == pytest.approx(want, rel=1e-12)
    # the steady state beats TP alone on the whole batch, which p stage times cost at m = 1
    assert got < tp_only().step_seconds(n, ctx, 0, 0, 0, 0)


@pytest.mark.parametrize("pp", [2, 4])
def test_one_request_pays_the_whole_pipeline_bubble(pp: int) -> None:
    one = piped(4, pp).step_seconds(1, 2000, 0, 0, 0, 0)
    want = tp_only().step_seconds(1, 2000, 0, 0, 0, 0) + (pp - 1) * send_by_hand(1, 4)
    assert one == pytest.approx(want, rel=1e-12)
    assert one > tp_only().step_seconds(1, 2000, 0, 0, 0, 0)  # never faster than TP alone
    prompt = piped(4, pp).step_seconds(0, 0, 3000, 3000 * 3000, 3000, 1)
    base = tp_only().step_seconds(0, 0, 3000, 3000 * 3000, 3000, 1)
    assert prompt == pytest.approx(base + (pp - 1) * send_by_hand(3000, 4), rel=1e-12)


def test_a_mixed_round_gives_the_heaviest_micro_batch_whole_chunks() -> None:
    # 3 decodes + 2 chunks over 4 stages: m = 4; the heaviest holds 1 decode and 1 chunk
    # (the chunks' sums halved, rounded up), its context 1/3 of the decodes'
    got = piped(4, 4).step_seconds(3, 3000, 1001, 1001 * 1001 + 1, 1001, 2)
    want = tp_only().step_seconds(1, 3000 * (1 / 3), 501, 501001, 501, 1)
    assert got == pytest.approx(want + 3 * send_by_hand(1 + 501, 4), rel=1e-12)


def test_stages_split_layers_as_vllm_get_pp_indices() -> None:
    assert stage_layers(80, 2) == [40, 40]
    assert stage_layers(80, 3) == [27, 27, 26]  # the remainder before the last stage
    assert stage_layers(7, 4) == [2, 2, 2, 1]
    with pytest.raises(ConfigError, match="pipeline_parallel_size"):
        stage_layers(80, 81)


def test_kv_plan_by_hand_each_gpu_holds_its_stage_s_layers() -> None:
    one = plan_memory(M70, H100, 4)
    two = plan_memory(M70, H100, 4, pp=2)
    emb = M70.embedding_params * M70.dtype_bytes / 4
    layer_w = M70.weight_bytes / 4 - 2 * emb  # untied: embedding and LM head
    w = layer_w / 2 + emb  # 40 layers and the embedding (stage 0) or the head (stage 1)
    per_tok = 2 * 40 * (8 / 4) * 128 * 2  # K and V of 40 layers, 2 of 8 KV heads, bf16
    assert two.weight_bytes_per_gpu == pytest.approx(w)
    assert two.kv_bytes_per_token_per_gpu == pytest.approx(per_tok)
    assert one.kv_bytes_per_token_per_gpu == 2 * per_tok
    free = 0.9 * H100.mem_bytes - two.reserve_bytes_per_gpu - w
    assert two.num_blocks == int(free // (per_tok * 16)) - 1
    assert two.reserve_bytes_per_gpu == one.reserve_bytes_per_gpu
    assert two.kv_capacity_tokens > 2 * one.kv_capacity_tokens  # half the KV, less weight
    assert two.kv_bytes_per_gpu / GIB > one.kv_bytes_per_gpu / GIB


def test_pp_1_is_the_tp_model_and_plan_unchanged() -> None:
    base = build_perf_model("engine", M70, H100, 4)
    same = build_perf_model("engine", M70, H100, 4, engine=EngineChoice(pipeline=1))
    assert type(same) is type(base) is EnginePerfModel
    assert perf_model_source(same) == perf_model_source(base)
    assert same.step_ns(37, 37 * 900, 512, 512 * 512, 512, 1) == base.step_ns(
        37, 37 * 900, 512, 512 * 512, 512, 1
    )
    assert dataclasses.asdict(plan_memory(M70, H100, 4, pp=1)) == dataclasses.asdict(
        plan_memory(M70, H100, 4)
    )
    assert perf_model_source(piped(4, 2)).endswith("/tp4+pp2")


def _cfg(**kw):
    wl = {"num_requests": 30, "rate": 8.0, "prompt_len": 400, "output_len": 40}
    return load_config({"model": "llama-3.1-8b", "gpu": "h100", "workload": wl, **kw})


def test_pp_1_runs_byte_identical_and_pp_2_records_the_pipeline() -> None:
    from tidal.sim.run import run_simulation

    plain = run_simulation(_cfg()).metrics
    one = run_simulation(_cfg(pipeline_parallel_size=1)).metrics
    drop = ("wall_s", "load_s", "simulate_s", "simulated_requests_per_s")
    assert {k: v for k, v in one.items() if k not in drop} == {
        k: v for k, v in plain.items() if k not in drop
    }
    two = run_simulation(_cfg(pipeline_parallel_size=2)).metrics
    assert two["perf_model_source"].endswith("+pp2")
    assert two["kv_capacity_tokens"] > plain["kv_capacity_tokens"]


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"pipeline_parallel_size": 0}, "pipeline_parallel_size"),
        ({"pipeline_parallel_size": 33}, "--pipeline-parallel-size from 1 to 32"),
        ({"pipeline_parallel_size": 2, "perf_model": "roofline"}, "--pipeline-parallel-size"),
        ({"pipeline_parallel_size": 2, "gpu": "a40"}, "--pipeline-parallel-size"),
        ({"pipeline_parallel_size": 2, "speculative": {"method": "ngram",
                                                       "num_speculative_tokens": 2}},
         "speculative decoding over pipeline stages"),
        ({"pipeline_parallel_size": 2, "perf_model": "engine", "deployment": {"mode": "disagg"}},
         "disaggregated pools over pipeline stages"),
    ],
)  # fmt: skip
def test_bad_pipeline_settings_are_refused_naming_the_flag(kw, match) -> None:
    with pytest.raises((ConfigError, ValueError), match=match):
        _cfg(**kw)


@lru_cache(maxsize=4)
def small_pipe(pp: int) -> PerfModel:
    m, g = get_model("llama-3.1-8b"), get_gpu("h100")
    return build_perf_model("engine", m, g, 1, engine=EngineChoice(pipeline=pp))


@st.composite
def workloads(draw):
    n = draw(st.integers(1, 30))
    gaps = draw(st.lists(st.floats(0, 0.1), min_size=n, max_size=n))
    prompts = draw(st.lists(st.integers(1, 500), min_size=n, max_size=n))
    outputs = draw(st.lists(st.integers(1, 200), min_size=n, max_size=n))
    return request_set(np.cumsum(gaps), prompts, outputs)


@settings(max_examples=25, deadline=None)
@given(
    rs=workloads(),
    pp=st.sampled_from([2, 3, 4]),
    budget=st.sampled_from([64, 512, 2048]),
    max_seqs=st.integers(1, 24),
    concurrency=st.one_of(st.none(), st.integers(1, 8)),
)
def test_fast_forward_is_exact_over_pipeline_stages(rs, pp, budget, max_seqs, concurrency):
    perf = small_pipe(pp)
    assert isinstance(perf, PipelinePerfModel)
    longest = int((rs.prompt_len + rs.output_len).max())
    blocks = -(-longest // 16) + 200
    runs = []
    for ff in (False, True):
        s = make_scheduler(blocks, 16, max(budget, max_seqs), max_seqs)
        rec, sim, _ = simulate(rs, s, perf, fast_forward=ff, concurrency=concurrency)
        runs.append((rec, sim, s))
    (a, sa, s1), (b, sb, s2) = runs
    for col in ("first_scheduled_ns", "first_token_ns", "finish_ns", "num_preemptions"):
        np.testing.assert_array_equal(getattr(a, col), getattr(b, col), err_msg=col)
    assert s1.num_steps == s2.num_steps
    assert sb.num_events <= sa.num_events
