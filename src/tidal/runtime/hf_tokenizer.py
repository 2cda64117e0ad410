"""A Hugging Face model directory's tokenizer: ``tokenizer.json`` (the ``tokenizers`` library)
and the chat template of ``tokenizer_config.json`` (rendered with Jinja2 in a sandbox, as
transformers does).

Conventions (vLLM's): a completion prompt is encoded with the tokenizer's special tokens (its
post-processor adds BOS where the model expects it); a chat is rendered by the template with
``add_generation_prompt=True`` and encoded without them (the template writes ``bos_token``
itself). Decoding skips special tokens. Streaming decodes incrementally: the text of the tokens
since a moving offset is decoded again each step and only a complete suffix (not ending in an
incomplete UTF-8 sequence, U+FFFD) is emitted, so byte-level pieces join into characters.
A model without a chat template gets the byte tokenizer's ``<|role|>`` format. A template that
refuses the messages (its ``raise_exception``, e.g. Llama-2-chat's "roles must alternate") or
fails on them raises :class:`ChatTemplateError` with the template's reason (the API's 400).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from tidal.core.errors import ConfigError
from tidal.runtime.tokenizer import ByteTokenizer


def _token_text(value: Any) -> str | None:
    """``"</s>"`` or ``{"content": "</s>", ...}`` (both appear in tokenizer_config.json)."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise ConfigError("model", f"cannot read {path}: {err}") from None
    return data if isinstance(data, dict) else {}


class ChatTemplateError(ValueError):
    """The model's chat template refused or could not render the messages."""


class HFTokenizer:
    def __init__(self, path: str | os.PathLike[str], vocab_size: int) -> None:
        try:
            from tokenizers import Tokenizer  # lazy: checks that the optional extra is installed
        except ImportError as err:
            raise ConfigError(
                "model", f"{err}", "install the server with: pip install 'tidal[serve]'"
            ) from None
        d = Path(path).expanduser()
        file = d / "tokenizer.json"
        if not file.is_file():
            raise ConfigError("model", f"{d} has no tokenizer.json", "save the tokenizer beside it")
        self._tok = Tokenizer.from_file(str(file))
        self.vocab_size = vocab_size
        conf = _read_json(d / "tokenizer_config.json")
        model_conf = _read_json(d / "config.json")
        self.bos_token = _token_text(conf.get("bos_token")) or ""
        self.eos_token = _token_text(conf.get("eos_token")) or ""
        self.chat_template = conf.get("chat_template")
        eos: Any = self._tok.token_to_id(self.eos_token) if self.eos_token else None
        if eos is None:
            cfg_eos = model_conf.get("eos_token_id")
            eos = cfg_eos[0] if isinstance(cfg_eos, list) and cfg_eos else cfg_eos
        self.eos_id: int = int(eos) if isinstance(eos, int) else -1
        """-1: the model declares no end-of-sequence token (requests stop at max_tokens)."""
        self._template: Any = None

    def encode(self, text: str, add_bos: bool = True) -> list[int]:
        return list(self._tok.encode(text, add_special_tokens=add_bos).ids)

    def decode(self, ids: Iterable[int]) -> str:
        return str(self._tok.decode(list(ids), skip_special_tokens=True))

    def apply_chat_template(self, messages: Iterable[Mapping[str, str]]) -> str:
        msgs = [dict(m) for m in messages]
        if not self.chat_template:
            return ByteTokenizer.apply_chat_template(ByteTokenizer(258), msgs)
        if self._template is None:
            # lazy: optional dependency (jinja2)
            from jinja2.exceptions import TemplateError
            from jinja2.sandbox import ImmutableSandboxedEnvironment

            def raise_exception(message: str) -> None:
                raise TemplateError(message)

            env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
            env.globals["raise_exception"] = raise_exception
            self._template = env.from_string(self.chat_template)
        from jinja2.exceptions import TemplateError  # lazy: optional dependency (jinja2)

        try:
            return str(
                self._template.render(
                    messages=msgs,
                    add_generation_prompt=True,
                    bos_token=self.bos_token,
                    eos_token=self.eos_token,
                )
            )
        except TemplateError as err:  # raise_exception, or an undefined name, in the template
            msg = f"the model's chat template refused the messages: {err}"
            raise ChatTemplateError(msg) from None
        except (TypeError, ValueError, KeyError, IndexError, AttributeError) as err:
            raise ChatTemplateError(
                f"the model's chat template failed on these messages: {err!r}"
            ) from None

    def encode_chat(self, messages: Iterable[Mapping[str, str]]) -> list[int]:
        return self.encode(self.apply_chat_template(messages), add_bos=False)

    def decoder(self) -> IncrementalHFDecoder:
        return IncrementalHFDecoder(self)

    def token_text(self, token: int) -> tuple[str, bytes]:
        """One token's text and bytes; a piece that is no whole character alone: its vocabulary
        entry (as vLLM shows byte-level pieces)."""
        text = self.decode([token])
        if "\ufffd" in text or (not text and token < self.vocab_size):
            text = self._tok.id_to_token(token) or ""
        return text, text.encode("utf-8", "surrogatepass")


class IncrementalHFDecoder:
    """Text deltas of a token stream (see the module docstring)."""

    def __init__(self, tok: HFTokenizer) -> None:
        self.tok = tok
        self.ids: list[int] = []
        self.prefix = 0
        self.read = 0

    def step(self, token: int) -> str:
        self.ids.append(token)
        before = self.tok.decode(self.ids[self.prefix : self.read])
        text = self.tok.decode(self.ids[self.prefix :])
        if len(text) > len(before) and not text.endswith("\ufffd"):
            self.prefix, self.read = self.read, len(self.ids)
            return text[len(before) :]
        return ""

    def flush(self) -> str:
        before = self.tok.decode(self.ids[self.prefix : self.read])
        text = self.tok.decode(self.ids[self.prefix :])
        self.prefix = self.read = len(self.ids)
        return text[len(before) :] if len(text) > len(before) else ""


def tokenizer_for(model: str, vocab_size: int) -> ByteTokenizer | HFTokenizer:
    """A model directory's own tokenizer; the byte tokenizer for catalog models."""
    from tidal.runtime.hf import is_hf_dir  # lazy: loads torch, the engine extra

    return HFTokenizer(model, vocab_size) if is_hf_dir(model) else ByteTokenizer(vocab_size)
