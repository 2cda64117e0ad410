"""A byte-level tokenizer: ids 0–255 are the bytes of UTF-8 text, then a few specials.

Enough for dummy weights (and any model whose vocabulary starts with the 256 bytes). Ids from
258 up to the model's vocabulary size are "reserved": they decode to nothing. Streaming decodes
incrementally, so a multi-byte character split across tokens is emitted once complete; invalid
byte sequences become U+FFFD.

:meth:`ByteTokenizer.text_ids` are the ids a catalog-shape model (dummy or ``--weights``,
served with this tokenizer) may emit (:func:`tidal.runtime.config.build_engine` masks the
others): each decodes to one whole character that encodes back to that one id, so any
sequence of them decodes to text that a client re-tokenizes to as many tokens as the server
counted (a random model sampling bytes ≥ 0x80 or reserved ids would give U+FFFD and vanishing
tokens). The same tokenizer as a
Hugging Face ``tokenizer.json`` (for clients that count tokens, e.g. ``aiperf --tokenizer``,
``guidellm --processor``): :func:`write_hf_tokenizer`, shipped in :data:`HF_DIR`.
"""

from __future__ import annotations

import codecs
import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

BOS = 256
EOS = 257
NUM_SPECIAL = 2
HF_DIR = Path(__file__).resolve().parent.parent / "data" / "byte_tokenizer"
"""The byte tokenizer as a Hugging Face tokenizer directory (:func:`write_hf_tokenizer`)."""


class ByteTokenizer:
    bos_id = BOS
    eos_id = EOS

    def __init__(self, vocab_size: int) -> None:
        if vocab_size < 256 + NUM_SPECIAL:
            raise ValueError(f"a byte tokenizer needs a vocabulary of >= 258, got {vocab_size}")
        self.vocab_size = vocab_size

    def encode(self, text: str, add_bos: bool = True) -> list[int]:
        ids = list(text.encode("utf-8"))
        return [BOS, *ids] if add_bos else ids

    def decode(self, ids: Iterable[int]) -> str:
        return bytes(i for i in ids if i < 256).decode("utf-8", errors="replace")

    def apply_chat_template(self, messages: Iterable[Mapping[str, str]]) -> str:
        """``<|role|>\\ncontent\\n`` per message, then ``<|assistant|>\\n`` to generate."""
        parts = [f"<|{m['role']}|>\n{m['content']}\n" for m in messages]
        return "".join(parts) + "<|assistant|>\n"

    def encode_chat(self, messages: Iterable[Mapping[str, str]]) -> list[int]:
        return self.encode(self.apply_chat_template(messages))

    def decoder(self) -> IncrementalDecoder:
        return IncrementalDecoder()

    def text_ids(self) -> list[int]:
        """Printable ASCII, newline and tab, and EOS: ids whose text re-encodes to themselves."""
        return [9, 10, *range(0x20, 0x7F), EOS]

    def token_text(self, token: int) -> tuple[str, bytes]:
        """One token's text and bytes (a byte that is no character alone: ``bytes:\\xNN``,
        vLLM's convention)."""
        if token >= 256:
            return ({BOS: "<s>", EOS: "</s>"}.get(token, ""), b"")
        b = bytes((token,))
        return (b.decode() if token < 0x80 else f"bytes:\\x{token:02x}", b)


def _byte_alphabet() -> list[str]:
    """GPT-2's byte-to-character map (the ``ByteLevel`` pre-tokenizer's alphabet)."""
    keep = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    chars, extra = {}, 0
    for b in range(256):
        if b in keep:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return [chars[b] for b in range(256)]


def write_hf_tokenizer(directory: str | os.PathLike[str]) -> Path:
    """The byte tokenizer as a Hugging Face tokenizer directory (``tokenizer.json``,
    ``tokenizer_config.json``): id b is byte b, 256 ``<s>`` (added before a prompt), 257
    ``</s>``; ``transformers.AutoTokenizer`` and ``tokenizers`` encode as :meth:`encode`."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    vocab = {c: i for i, c in enumerate(_byte_alphabet())}
    special = [
        {"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
         "normalized": False, "special": True}
        for i, t in ((BOS, "<s>"), (EOS, "</s>"))
    ]  # fmt: skip
    spec: dict[str, object] = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": special,
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                          "use_regex": False},
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                       {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                     {"Sequence": {"id": "A", "type_id": 0}},
                     {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {"<s>": {"id": "<s>", "ids": [BOS], "tokens": ["<s>"]}},
        },
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                    "use_regex": False},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": []},
    }  # fmt: skip
    (d / "tokenizer.json").write_text(json.dumps(spec, ensure_ascii=False))
    conf = {
        "bos_token": "<s>",
        "eos_token": "</s>",
        "add_bos_token": True,
        "model_max_length": 1 << 20,
        "tokenizer_class": "PreTrainedTokenizerFast",
    }
    (d / "tokenizer_config.json").write_text(json.dumps(conf, indent=1))
    return d


class IncrementalDecoder:
    """Text deltas of a token stream (UTF-8 characters may span several byte tokens)."""

    def __init__(self) -> None:
        self._dec = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def step(self, token: int) -> str:
        if token >= 256:
            return ""
        return self._dec.decode(bytes((token,)))

    def flush(self) -> str:
        return self._dec.decode(b"", final=True)
