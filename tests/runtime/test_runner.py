"""The model runner: batching and paged attention must not change what a request generates.

Greedy output of a request is compared token for token between running it alone and running it
batched with others (different lengths, staggered arrivals, chunked prefills mixed with decodes),
and after preemption by recompute forced by a tiny KV cache. A dense reference forward (full
causal attention, no cache) checks the logits themselves.
"""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from tests.runtime.helpers import prompts, run, tiny_engine  # noqa: E402
from tidal.core.errors import ConfigError  # noqa: E402
from tidal.hardware.models import get_model  # noqa: E402
from tidal.runtime.model import LlamaConfig, LlamaForCausalLM, apply_rotary  # noqa: E402
from tidal.runtime.sampling import SamplingParams  # noqa: E402

pytestmark = pytest.mark.engine


def _alone(ps, max_tokens, **kw):
    return [run(tiny_engine(**kw), [p], max_tokens)[0][0] for p in ps]


def test_greedy_output_is_identical_alone_and_batched():
    ps = prompts(6, seed=1, lo=3, hi=70)
    alone = _alone(ps, 12)
    # budget 32 chunks the long prompts; staggered arrivals mix prefill chunks with decodes.
    rt = tiny_engine(token_budget=32, max_seqs=8)
    batched, reqs = run(rt, ps, 12, arrive_at_step=[0, 0, 1, 3, 4, 9])
    assert batched == alone
    assert all(len(o) == 12 for o in batched)
    assert all(r.num_preemptions == 0 for r in reqs)


def test_greedy_output_is_identical_after_preemption_by_recompute():
    ps = prompts(5, seed=2, lo=10, hi=30)
    alone = _alone(ps, 16)
    # 24 blocks of 4 tokens (96 token slots) cannot hold 5 requests of up to 45 tokens.
    rt = tiny_engine(num_kv_blocks=24, token_budget=64, max_seqs=8)
    batched, reqs = run(rt, ps, 16)
    assert rt.scheduler.num_preemptions > 0
    assert any(r.num_preemptions for r in reqs)
    assert batched == alone


def test_temperature_sampling_depends_on_the_request_seed_not_the_batch():
    ps = prompts(4, seed=3)

    def params(i):
        return SamplingParams(temperature=1.0, seed=100 + i)

    alone = [
        run(tiny_engine(), [p], 10, sampling=lambda _, i=i: params(i))[0][0]
        for i, p in enumerate(ps)
    ]
    batched, _ = run(tiny_engine(), ps, 10, sampling=params)
    assert batched == alone
    greedy, _ = run(tiny_engine(), ps, 10)
    assert greedy != batched  # temperature 1 departs from the greedy path
    reseeded, _ = run(tiny_engine(), ps, 10, sampling=lambda i: SamplingParams(1.0, seed=7 + i))
    assert reseeded != batched


def _dense_logits(model: LlamaForCausalLM, ids: list[int]) -> torch.Tensor:
    """Reference forward over the whole sequence: plain causal attention, no cache, no paging."""
    cfg = model.config
    x = model.model.embed_tokens(torch.tensor(ids))
    pos = torch.arange(len(ids))
    g = cfg.num_heads // cfg.num_kv_heads
    for layer in model.model.layers:
        a = layer.self_attn
        h = layer.input_layernorm(x)
        q, k, v = a.qkv_proj(h).split([a.q_size, a.kv_size, a.kv_size], -1)
        q = q.view(len(ids), cfg.num_heads, cfg.head_dim)
        k = k.view(len(ids), cfg.num_kv_heads, cfg.head_dim)
        v = v.view(len(ids), cfg.num_kv_heads, cfg.head_dim)
        cos, sin = model.rotary.tables(pos, q.dtype)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        k = k.repeat_interleave(g, dim=1)
        v = v.repeat_interleave(g, dim=1)
        s = torch.einsum("qhd,khd->hqk", q, k) / math.sqrt(cfg.head_dim)
        s = s.masked_fill(torch.ones_like(s[0], dtype=torch.bool).triu(1), float("-inf"))
        o = torch.einsum("hqk,khd->qhd", s.softmax(-1), v).reshape(len(ids), -1)
        x = x + a.o_proj(o)
        x = x + layer.mlp(layer.post_attention_layernorm(x))
    logits = model.lm_head(model.model.norm(x))
    # dummy weights emit only the byte tokenizer's text ids (the model's output mask)
    return logits if model.output_mask is None else logits + model.output_mask


@torch.inference_mode()
def test_paged_runner_matches_a_dense_reference_forward():
    # 16-token chunks: a 37-token prompt takes 3 steps
    rt = tiny_engine(token_budget=16, max_seqs=4)
    ps = prompts(3, seed=4, lo=20, hi=40)
    outs, _ = run(rt, ps, 8)
    model = rt.runner.model
    for p, out in zip(ps, outs, strict=True):
        logits = _dense_logits(model, p + out[:-1])
        # the token sampled after position i is the argmax of the reference logits at i
        ref = logits[len(p) - 1 :].argmax(-1).tolist()
        assert ref == out
    # and the logits agree numerically, not only in their argmax
    rt2 = tiny_engine(token_budget=16, max_seqs=4)
    r_ids = ps[0]
    from tidal.core.request import Request

    req = Request(0, 0, len(r_ids), 1, token_ids=list(r_ids))
    rt2.scheduler.add_request(req)
    captured = []
    orig = rt2.runner.model.forward

    def spy(batch, layers):
        out = orig(batch, layers)
        captured.append(out)
        return out

    rt2.runner.model.forward = spy
    while rt2.scheduler.has_work():
        rt2.engine.step()
    ref = _dense_logits(model, r_ids)[-1]
    torch.testing.assert_close(captured[-1][0], ref, rtol=1e-4, atol=1e-4)


def test_catalog_shapes_build_runtime_configs_and_moe_is_refused():
    cfg = LlamaConfig.from_spec(get_model("llama-3.1-8b"))
    assert (cfg.num_layers, cfg.hidden_size, cfg.num_kv_heads, cfg.head_dim) == (32, 4096, 8, 128)
    tiny = LlamaConfig.from_spec(get_model("tiny-llama"))
    n_params = sum(p.numel() for p in LlamaForCausalLM(tiny).parameters())
    assert n_params == get_model("tiny-llama").num_params  # the catalog arithmetic
    with pytest.raises(ConfigError, match="mixture-of-experts"):
        LlamaConfig.from_spec(get_model("qwen3-30b-a3b"))


def test_hugging_face_architectures_the_runtime_lacks_are_refused():
    from tidal.hardware.hf_config import shipped_configs

    if not shipped_configs():
        pytest.skip("aiconfigurator-core not installed")
    with pytest.raises(ConfigError, match="linear-attention layers"):
        LlamaConfig.from_spec(get_model("Qwen/Qwen3.5-27B"))
    dense = LlamaConfig.from_spec(get_model("Qwen/Qwen3-0.6B"))
    assert (dense.num_layers, dense.head_dim) == (28, 128)


def test_safetensors_round_trip_and_hugging_face_names(tmp_path):
    pytest.importorskip("safetensors")
    from safetensors.torch import save_file

    from tidal.runtime.weights import save_safetensors

    ps = prompts(2, seed=5)
    rt = tiny_engine(seed=11)
    ref, _ = run(rt, ps, 6)
    path = tmp_path / "w.safetensors"
    save_safetensors(rt.runner.model, path)
    assert run(tiny_engine(weights=str(path)), ps, 6)[0] == ref
    # split the fused matrices into Hugging Face names; loading fuses them back
    tensors = {k: v.clone() for k, v in rt.runner.model.named_parameters()}
    cfg = rt.runner.model.config
    q, kv = cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
    for i in range(cfg.num_layers):
        pre = f"model.layers.{i}."
        qw, kw, vw = tensors.pop(pre + "self_attn.qkv_proj.weight").split([q, kv, kv])
        gw, uw = tensors.pop(pre + "mlp.gate_up_proj.weight").chunk(2)
        tensors.update(
            {
                pre + "self_attn.q_proj.weight": qw,
                pre + "self_attn.k_proj.weight": kw,
                pre + "self_attn.v_proj.weight": vw,
                pre + "mlp.gate_proj.weight": gw,
                pre + "mlp.up_proj.weight": uw,
            }
        )
    hf = tmp_path / "hf.safetensors"
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(hf))
    assert run(tiny_engine(weights=str(hf)), ps, 6)[0] == ref
    del tensors["lm_head.weight"]
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(hf))
    with pytest.raises(ConfigError, match="lm_head"):
        tiny_engine(weights=str(hf))
