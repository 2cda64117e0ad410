"""The tidal-gpu-profile/1 format: round trips, validation, the bundled Vidur data, lookup."""

from __future__ import annotations

import gzip
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidal.core.errors import ConfigError
from tidal.hardware.models import get_model
from tidal.hardware.opprofile import (
    BUNDLED_DIR,
    AllReduceOps,
    GPUProfile,
    LinearOps,
    ModelShape,
    bundled_profiles,
    deployment,
    load_profile,
    save_profile,
)

SHAPE = ModelShape(hidden=64, q_heads=4, kv_heads=2, intermediate=128, vocab=100)


@st.composite
def profiles(draw: st.DrawFn) -> GPUProfile:
    n = draw(st.integers(1, 6))
    tokens = sorted(draw(st.sets(st.integers(1, 5000), min_size=n, max_size=n)))
    vals = st.lists(st.floats(0, 1e4, allow_nan=False), min_size=n, max_size=n)
    lin = LinearOps(
        model="m", tp=draw(st.sampled_from([1, 2])), shape=SHAPE, tokens=tokens,
        layer_us={"attn_pre_proj": draw(vals), "add": draw(vals)}, step_us={"emb": draw(vals)},
    )  # fmt: skip
    ar = AllReduceOps(link="dgx", tp=2, bytes=[1024 * t for t in tokens], us=draw(vals))
    return GPUProfile(gpu="h200", source="test", linear=[lin], all_reduce=[ar])


@settings(max_examples=30, deadline=None)
@given(profiles(), st.booleans())
def test_save_load_round_trip(tmp_path_factory: pytest.TempPathFactory, prof: GPUProfile,
                              gz: bool) -> None:  # fmt: skip
    path = tmp_path_factory.mktemp("p") / ("p.json.gz" if gz else "p.json")
    save_profile(prof, path)
    assert load_profile(path) == prof
    raw = path.read_bytes()
    assert (raw[:2] == b"\x1f\x8b") == gz
    assert not list(path.parent.glob(".*"))  # no temp file left behind


def test_bad_files_name_the_file_and_the_field(tmp_path) -> None:
    p = tmp_path / "bad.json"
    doc = GPUProfile(gpu="h200", source="t").model_dump(mode="json")
    doc["linear"] = [{"model": "m", "tp": 1, "shape": SHAPE.model_dump(), "tokens": [2, 1],
                      "layer_us": {"add": [1.0, 2.0]}}]  # fmt: skip
    p.write_text(json.dumps(doc))
    with pytest.raises(ConfigError, match=r"bad\.json.*strictly ascending"):
        load_profile(p)
    doc["linear"][0]["tokens"] = [1, 2, 3]
    p.write_text(json.dumps(doc))
    with pytest.raises(ConfigError, match="2 values for 3 grid points"):
        load_profile(p)
    p.write_bytes(gzip.compress(b'{"format": "other/9"}'))
    with pytest.raises(ConfigError, match="format"):
        load_profile(p)
    with pytest.raises(ConfigError, match="does not exist"):
        load_profile(tmp_path / "missing.json")


def test_bundled_profiles_match_the_catalog_and_stay_small() -> None:
    profs = bundled_profiles()
    assert {p.gpu for p in profs} == {"a100-80gb", "h100", "a40"}
    total = sum(f.stat().st_size for f in BUNDLED_DIR.glob("*.json.gz"))
    assert total < 2 * 1024**2
    assert (BUNDLED_DIR / "LICENSE.vidur").read_text().strip().startswith("MIT License")
    n = 0
    for p in profs:
        for lin in p.linear:
            m = get_model(lin.model)
            assert (lin.shape.hidden, lin.shape.q_heads, lin.shape.kv_heads) == (
                m.hidden_size, m.num_heads, m.num_kv_heads)  # fmt: skip
            assert lin.shape.intermediate == m.intermediate_size
            assert lin.shape.gated_mlp == m.gated_mlp
            assert lin.provenance is not None
            assert lin.provenance.repo == "microsoft/vidur"
            assert all(v >= 0 for col in lin.layer_us.values() for v in col)
            n += 1
    assert n == 71  # 7 models × 4 TP on A100 + phi-2, Llama-3 8B/70B; 5×4 + phi-2 on H100/A40


def test_deployment_lookup_picks_the_per_gpu_attention_shape_and_the_dgx_link() -> None:
    m = get_model("codellama-34b")
    heads = (m.num_heads, m.num_kv_heads, m.d_head)
    tp2 = deployment("a100-80gb", "codellama-34b", 2, heads=heads)
    assert tp2 is not None
    assert tp2.attention is not None
    assert (tp2.attention.q_heads, tp2.attention.kv_heads) == (32, 4)
    assert tp2.all_reduce is not None
    assert tp2.all_reduce.link == "dgx"
    assert tp2.host is not None
    assert tp2.key == "vidur/a100-80gb/codellama-34b/tp2"
    tp1 = deployment("a100-80gb", "codellama-34b", 1, heads=heads)
    assert tp1 is not None
    assert tp1.attention is None
    assert tp1.all_reduce is None
    assert deployment("a100-80gb", "codellama-34b", 2, heads=heads, link="pairwise_nvlink")\
        .all_reduce.link == "pairwise_nvlink"  # type: ignore[union-attr]  # fmt: skip
    assert deployment("h200", "qwen3-8b", 1) is None
    assert deployment("h100", "llama-3-8b", 1) is None  # Llama-3 was profiled on A100 only
