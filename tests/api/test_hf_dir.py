"""``tidal serve /path/to/model``: a Hugging Face directory the test builds (a tiny Llama with
random weights in transformers, a byte-level BPE tokenizer trained here, a chat template) is
served, and the official ``openai`` client gets the text transformers' own tokenizer and model
produce: same prompt ids, same greedy tokens, same decoded text."""

from __future__ import annotations

import json
import threading
import time

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")
openai = pytest.importorskip("openai")
uvicorn = pytest.importorskip("uvicorn")

from tests.api.conftest import _free_port  # noqa: E402
from tests.runtime.test_hf_reference import _randomize  # noqa: E402
from tidal.api.app import create_app  # noqa: E402
from tidal.runtime.config import RuntimeConfig, build_engine  # noqa: E402
from tidal.runtime.driver import EngineDriver  # noqa: E402
from tidal.runtime.hf_tokenizer import HFTokenizer, tokenizer_for  # noqa: E402

pytestmark = pytest.mark.engine

CORPUS = [
    "the river runs to the sea and the sea runs to the sky",
    "a stone in the river is smooth, a cloud over the river is grey",
    "héllo wörld: tides rise and fall twice a day — ça va?",
    "light travels fast; the tide travels slowly but surely",
] * 20
TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}"
    "{{ eos_token }}{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def build_model_dir(path):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=["<s>", "</s>", "<unk>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(CORPUS, trainer)
    bos, eos = tok.token_to_id("<s>"), tok.token_to_id("</s>")
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", bos)]
    )
    tok.save(str(path / "tokenizer.json"))
    (path / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "bos_token": "<s>",
                "eos_token": "</s>",
                "chat_template": TEMPLATE,
                "tokenizer_class": "PreTrainedTokenizerFast",
            }
        )
    )
    cfg = transformers.LlamaConfig(
        vocab_size=tok.get_vocab_size(),
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        bos_token_id=bos,
        eos_token_id=eos,
    )
    model = transformers.LlamaForCausalLM(cfg)
    _randomize(model, seed=11)
    model.eval()
    model.save_pretrained(path)
    return model


def greedy(model, ids, n):
    out = list(ids)
    with torch.no_grad():
        for _ in range(n):
            logits = model(input_ids=torch.tensor([out])).logits[0, -1]
            out.append(int(logits.argmax()))
    return out[len(ids) :]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    path = tmp_path_factory.mktemp("hf-model")
    model = build_model_dir(path)
    rt = build_engine(RuntimeConfig(model=str(path), num_kv_blocks=256, num_threads=1))
    tok = tokenizer_for(str(path), rt.runner.model.config.vocab_size)
    assert isinstance(tok, HFTokenizer)
    app = create_app(EngineDriver(rt), str(path), tokenizer=tok)
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x", max_retries=0)
    ref_tok = transformers.AutoTokenizer.from_pretrained(str(path))
    yield client, str(path), model, ref_tok
    server.should_exit = True
    thread.join(timeout=30)


def test_completion_text_is_the_reference_tokenizers_decoding(served):
    client, name, model, ref_tok = served
    prompt = "the river runs to the"
    ids = ref_tok(prompt)["input_ids"]
    assert ids[0] == ref_tok.bos_token_id
    want = ref_tok.decode(greedy(model, ids, 12), skip_special_tokens=True)
    r = client.completions.create(
        model=name, prompt=prompt, max_tokens=12, temperature=0, extra_body={"ignore_eos": True}
    )
    assert r.usage.prompt_tokens == len(ids)
    assert r.usage.completion_tokens == 12
    assert r.choices[0].text == want
    assert want  # the random model does produce text


def test_chat_applies_the_template_and_streams_the_same_text(served):
    client, name, model, ref_tok = served
    messages = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "héllo wörld, what does the tide do?"},
    ]
    ids = ref_tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    ids = list(ids["input_ids"]) if hasattr(ids, "keys") else list(ids)
    rendered = ref_tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert rendered.startswith("<s><|system|>be brief</s>")
    assert rendered.endswith("<|assistant|>")
    want = ref_tok.decode(greedy(model, ids, 10), skip_special_tokens=True)
    kw = {"model": name, "messages": messages, "max_tokens": 10, "temperature": 0}
    r = client.chat.completions.create(**kw, extra_body={"ignore_eos": True})
    assert r.usage.prompt_tokens == len(ids)
    assert r.choices[0].message.content == want
    stream = client.chat.completions.create(**kw, stream=True, extra_body={"ignore_eos": True})
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert text == want


def test_eos_id_is_the_reference_tokenizers(served):
    _client, name, model, ref_tok = served
    tok = HFTokenizer(name, model.config.vocab_size)
    assert tok.eos_id == ref_tok.eos_token_id


def test_serve_cli_takes_the_directory_as_model(served, monkeypatch):
    from typer.testing import CliRunner

    import tidal.cli.serve as serve_cli
    from tidal.cli import app

    _, name, _, _ = served
    apps = []
    monkeypatch.setattr(
        serve_cli, "run_supervised", lambda server, driver: apps.append(server) or 0
    )
    args = ["serve", name, "--port", str(_free_port()), "--num-kv-blocks", "64"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    (server,) = apps
    state = server.config.app.state.tidal
    assert state.model_name == name
    assert isinstance(state.tokenizer, HFTokenizer)
    assert state.driver.runner.model.config.vocab_size == state.tokenizer._tok.get_vocab_size()
