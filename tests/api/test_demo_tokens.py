"""The demo model's outputs decode to the tokens the server counts: every id tiny-llama (dummy
weights) can emit is one whole character that re-encodes to that id, so a client that counts
output tokens by re-tokenizing the text (aiperf, guidellm) with the server's tokenizer
(``HF_DIR``, a Hugging Face ``tokenizer.json``) counts ``usage.completion_tokens``. Before:
random weights spread over reserved ids (decoding to nothing) and lone bytes ≥ 0x80 (U+FFFD)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
tokenizers = pytest.importorskip("tokenizers")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from tests.api.conftest import in_process  # noqa: E402
from tidal.runtime.tokenizer import HF_DIR, ByteTokenizer, write_hf_tokenizer  # noqa: E402

pytestmark = pytest.mark.engine
TOK = ByteTokenizer(512)


@pytest.fixture(scope="module")
def served():
    with in_process(num_kv_blocks=512) as pair:
        yield pair


@pytest.fixture(scope="module")
def hf():
    return tokenizers.Tokenizer.from_file(str(HF_DIR / "tokenizer.json"))


def test_the_shipped_tokenizer_json_is_the_byte_tokenizer(tmp_path, hf):
    fresh = write_hf_tokenizer(tmp_path)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        assert (fresh / name).read_text() == (HF_DIR / name).read_text(), name
    for text in ("hello", "héllo — ✓ 🙂\n\t", ""):
        assert hf.encode(text).ids == TOK.encode(text)
        assert hf.decode(TOK.encode(text), skip_special_tokens=True) == text


def test_the_demo_model_can_emit_only_text_tokens(served):
    _, driver = served
    mask = driver.runner.model.output_mask
    allowed = set(torch.nonzero(mask == 0).flatten().tolist())
    assert allowed == set(TOK.text_ids())
    for t in allowed - {TOK.eos_id}:
        s = TOK.decode([t])
        assert len(s) == 1
        assert TOK.encode(s, add_bos=False) == [t]


@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    prompt=st.text(max_size=12),
    temperature=st.sampled_from([0.0, 0.7, 1.5, 2.0]),
    seed=st.integers(0, 2**31),
    chat=st.booleans(),
)
def test_outputs_retokenize_to_the_counted_tokens(served, hf, prompt, temperature, seed, chat):
    client, _ = served
    common = {"max_tokens": 24, "temperature": temperature, "seed": seed, "ignore_eos": True}
    if chat:
        body = {**common, "messages": [{"role": "user", "content": prompt}]}
        r = client.post("/v1/chat/completions", json=body).json()
        text = r["choices"][0]["message"]["content"]
    else:
        r = client.post("/v1/completions", json={**common, "prompt": prompt or "x"}).json()
        text = r["choices"][0]["text"]
    assert "\ufffd" not in text
    assert len(hf.encode(text, add_special_tokens=False).ids) == r["usage"]["completion_tokens"]
    assert len(TOK.encode(text, add_bos=False)) == r["usage"]["completion_tokens"] == 24
