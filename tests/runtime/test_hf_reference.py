"""Tidal's runner against Hugging Face transformers (the reference implementation).

A tiny Llama and a Qwen2-style GQA model (biases on Q/K/V, tied embeddings) are built in
transformers with random weights, saved as safetensors with their ``config.json``, and loaded
into Tidal's runtime (``--weights``). Every logits row the runner samples from — under batching,
chunked prefill, preemption by recompute and decode over paged blocks of 4 tokens — must equal
transformers' logits at the same position of the same sequence within 1e-4.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from tests.runtime.helpers import prompts, run  # noqa: E402
from tidal.runtime.config import RuntimeConfig, build_engine  # noqa: E402
from tidal.runtime.hf import hf_llama_config  # noqa: E402
from tidal.runtime.sampling import GREEDY, sample  # noqa: E402

pytestmark = pytest.mark.engine
TOL = 1e-4


def _randomize(model, seed: int) -> None:
    """Weights of unit-scale activations (HF's 0.02 init gives near-flat logits), norm gains
    around 1 and non-zero biases, so every parameter shows in the logits."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1 + 0.1 * torch.randn(p.shape, generator=gen))
            elif name.endswith(".bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(torch.randn(p.shape, generator=gen) / p.shape[-1] ** 0.5)


def make_model(kind: str, path) -> object:
    common = {
        "vocab_size": 300,
        "hidden_size": 64,
        "intermediate_size": 96,
        "num_hidden_layers": 2,
        "max_position_embeddings": 256,
        "rms_norm_eps": 1e-6,
    }
    if kind == "llama":
        cfg = transformers.LlamaConfig(
            num_attention_heads=4, num_key_value_heads=4, rope_theta=10000.0, **common
        )
        model = transformers.LlamaForCausalLM(cfg)
    else:
        cfg = transformers.Qwen2Config(
            num_attention_heads=8,
            num_key_value_heads=2,
            rope_theta=1_000_000.0,
            tie_word_embeddings=True,
            **common,
        )
        model = transformers.Qwen2ForCausalLM(cfg)
    _randomize(model, seed=7)
    model.eval()
    model.save_pretrained(path)
    return model


@pytest.fixture(scope="module", params=["llama", "qwen2"])
def hf(request, tmp_path_factory):
    path = tmp_path_factory.mktemp(request.param)
    return request.param, make_model(request.param, path), path


def _recording(rt):
    """Wrap the runner so that every sampled row's logits are kept: {(request, k): logits}."""
    runner = rt.runner
    seen: dict[tuple[int, int], list[torch.Tensor]] = {}

    def run_step(plan):
        batch, samplers = runner.build(plan)
        logits = runner.model(batch, runner._layers)
        tokens = sample(logits, [GREEDY] * len(samplers), [None] * len(samplers))
        for req, row, tok in zip(samplers, logits, tokens, strict=True):
            seen.setdefault((req.request_id, len(req.token_ids) - req.prompt_len), []).append(row)
            req.token_ids.append(tok)
        return list(zip(samplers, tokens, strict=True))

    runner.run = run_step
    return seen


def _check(model, reqs, seen) -> int:
    n = 0
    with torch.no_grad():
        for r in reqs:
            ids = torch.tensor([r.token_ids[:-1]])
            ref = model(input_ids=ids).logits[0]
            for k in range(len(r.token_ids) - r.prompt_len):
                for row in seen[(r.request_id, k)]:
                    diff = (row - ref[r.prompt_len - 1 + k]).abs().max().item()
                    assert diff <= TOL, (r.request_id, k, diff)
                    n += 1
    return n


def _engine(path, **kw):
    kw.setdefault("block_size", 4)
    kw.setdefault("watermark", 0.0)
    kw.setdefault("num_threads", 1)
    return build_engine(
        RuntimeConfig(model=str(path), weights=str(path / "model.safetensors"), **kw)
    )


def test_config_json_gives_the_shape(hf):
    kind, _model, path = hf
    c = hf_llama_config(path)
    assert (c.num_layers, c.hidden_size, c.vocab_size) == (2, 64, 300)
    assert c.num_kv_heads == (4 if kind == "llama" else 2)
    assert c.qkv_bias == (kind == "qwen2")
    assert c.tie_embeddings == (kind == "qwen2")
    assert c.rope_theta == (10000.0 if kind == "llama" else 1_000_000.0)


def test_logits_match_under_batching_and_chunked_prefill(hf):
    _, model, path = hf
    # budget 16 chunks prompts of up to 60 tokens; staggered arrivals mix chunks and decodes
    rt = _engine(path, num_kv_blocks=256, token_budget=16, max_seqs=8)
    seen = _recording(rt)
    ps = [[t % 300 for t in p] for p in prompts(6, seed=3, lo=5, hi=60)]
    _, reqs = run(rt, ps, 10, arrive_at_step=[0, 0, 1, 2, 5, 7])
    assert _check(model, reqs, seen) == 60


def test_logits_match_after_preemption_by_recompute(hf):
    _, model, path = hf
    # 14 blocks of 4 tokens cannot hold 4 requests of ~30 tokens: some are preempted and
    # recomputed, and their later logits must still be the reference's
    rt = _engine(path, num_kv_blocks=14, token_budget=64, max_seqs=4)
    seen = _recording(rt)
    ps = [[t % 300 for t in p] for p in prompts(4, seed=5, lo=14, hi=20)]
    _, reqs = run(rt, ps, 12)
    assert sum(r.num_preemptions for r in reqs) > 0
    assert _check(model, reqs, seen) >= 48
