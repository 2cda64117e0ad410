"""The fields issue 28 added to ModelSpec (MoE shapes, windows, MLA, linear attention,
precision) change nothing for a model that does not set them: every quantity equals the
pre-issue-28 dense-transformer arithmetic, written out here as the reference."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tidal.hardware.models import MODELS, ModelSpec


def _reference(m: ModelSpec) -> dict[str, object]:
    """The catalog arithmetic before issue 28 (models.py at the parent commit)."""
    h = m.hidden_size
    d = m.head_dim or h // m.num_heads
    attn = h * m.num_heads * d + 2 * h * m.num_kv_heads * d + m.num_heads * d * h
    expert = (3 if m.gated_mlp else 2) * h * m.intermediate_size
    if m.num_experts > 0:
        mlp = m.num_experts * expert + h * m.num_experts
        active = m.num_active_experts * expert + h * m.num_experts
    else:
        mlp = active = expert
    emb = m.vocab_size * h
    head = 0 if m.tie_embeddings else emb
    params = m.num_layers * (attn + mlp + 2 * h) + emb + head + h
    weight = params * m.dtype_bytes
    expert_all = m.num_layers * m.num_experts * expert if m.num_experts else 0
    return {
        "num_params": params,
        "weight_bytes": weight,
        "layer_matmul_params": m.num_layers * (attn + active),
        "attn_flops_per_ctx_token": 4 * m.num_layers * m.num_heads * d,
        "kv_bytes_per_token": 2 * m.num_layers * m.num_kv_heads * d * m.dtype_bytes,
        "non_expert_weight_bytes": weight - expert_all * m.dtype_bytes,
        "kv_tp": [
            2 * m.num_layers * max(m.num_kv_heads / tp, 1.0) * d * m.dtype_bytes
            for tp in (1, 2, 4, 8, 16)
        ],
    }


def _now(m: ModelSpec) -> dict[str, object]:
    return {
        "num_params": m.num_params,
        "weight_bytes": m.weight_bytes,
        "layer_matmul_params": m.layer_matmul_params,
        "attn_flops_per_ctx_token": m.attn_flops_per_ctx_token,
        "kv_bytes_per_token": m.kv_bytes_per_token,
        "non_expert_weight_bytes": m.non_expert_weight_bytes,
        "kv_tp": [m.kv_bytes_per_token_per_gpu(tp) for tp in (1, 2, 4, 8, 16)],
    }


@st.composite
def legacy_specs(draw: st.DrawFn) -> ModelSpec:
    kv = draw(st.sampled_from([1, 2, 4, 8, 16, 32]))
    heads = kv * draw(st.integers(1, 8))
    moe = draw(st.booleans())
    experts = draw(st.integers(2, 256)) if moe else 0
    return ModelSpec(
        "x",
        num_layers=draw(st.integers(1, 128)),
        hidden_size=heads * draw(st.sampled_from([32, 64, 128])),
        num_heads=heads,
        num_kv_heads=kv,
        intermediate_size=draw(st.integers(64, 60_000)),
        vocab_size=draw(st.integers(256, 260_000)),
        head_dim=draw(st.sampled_from([0, 64, 128, 256])),
        gated_mlp=draw(st.booleans()),
        num_experts=experts,
        num_active_experts=draw(st.integers(1, experts)) if moe else 0,
        tie_embeddings=draw(st.booleans()),
        dtype_bytes=draw(st.sampled_from([2, 4])),
    )


@settings(max_examples=300, deadline=None)
@given(legacy_specs())
def test_specs_without_the_new_fields_keep_the_old_arithmetic(m):
    got, want = _now(m), _reference(m)
    assert got == want
    assert [type(v) for v in m_kv_tp(m)] == [float] * 5
    assert m.state_bytes_per_seq == 0
    assert m.kv_bytes_per_seq_per_gpu(2, 1000) == m.kv_bytes_per_token_per_gpu(2) * 1000


def m_kv_tp(m: ModelSpec) -> list[float]:
    return [m.kv_bytes_per_token_per_gpu(tp) for tp in (1, 2, 4, 8, 16)]


def test_every_catalog_model_keeps_the_old_arithmetic():
    for m in MODELS.values():
        assert _now(m) == _reference(m), m.name
