"""A byte-level tokenizer: ids 0–255 are the bytes of UTF-8 text, then a few specials.

Enough for dummy weights (and any model whose vocabulary starts with the 256 bytes). Ids from
258 up to the model's vocabulary size are "reserved": a model may sample them, and they decode
to nothing. Streaming decodes incrementally, so a multi-byte character split across tokens is
emitted once complete; invalid byte sequences become U+FFFD.
"""

from __future__ import annotations

import codecs
from collections.abc import Iterable, Mapping

BOS = 256
EOS = 257
NUM_SPECIAL = 2


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
