"""The requests a benchmark sends: ``random``, ``sharegpt`` or ``trace`` (vLLM ``bench serve``).

* ``random``: prompts of ``input_len`` token ids (uniform in ``[L(1−r), L(1+r)]`` for
  ``--random-range-ratio r``), ids drawn uniformly from the 256 byte-level ids that every
  vocabulary holds, so a completions prompt has exactly its drawn length on any server; on a chat
  endpoint the prompt is text of about that many tokens (random lowercase words, ~1 token each).
* ``sharegpt``: the first human turn of each conversation of a ShareGPT JSON file; the output
  length is the reply's estimated length (``--sharegpt-output-len`` overrides it). Without the
  server's tokenizer, lengths are estimated as UTF-8 bytes / 4; the server's own counts (usage)
  are what the results record.
* ``trace``: arrivals and lengths of a trace tidal reads (Azure CSV, Mooncake JSONL, a measured
  ``requests.parquet``); prompts are random ids of the trace's prompt lengths.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tidal.core.bounded import read_bytes
from tidal.core.errors import ConfigError, TidalError
from tidal.workload.traces import load_trace

DATASETS = ("random", "sharegpt", "trace")
BYTES_PER_TOKEN = 4
_WORDS = ("alpha", "beta", "gamma", "delta", "omega", "river", "stone", "cloud", "light", "tide")


@dataclass(frozen=True, slots=True)
class BenchRequest:
    prompt: str | list[int]
    prompt_len: int
    """Tokens as the client estimates them (exact for id prompts)."""
    output_len: int
    """``max_tokens`` sent."""
    arrival_s: float | None = None
    """Send time from a trace (None: the arrival process decides)."""


def random_requests(
    n: int,
    input_len: int,
    output_len: int,
    range_ratio: float,
    rng: np.random.Generator,
    as_text: bool,
) -> list[BenchRequest]:
    if input_len < 1 or output_len < 1:
        raise ConfigError("random-input-len", "lengths must be >= 1")
    if not 0 <= range_ratio < 1:
        raise ConfigError("random-range-ratio", f"must be in [0, 1), got {range_ratio}")

    def draw(length: int) -> np.ndarray:
        lo = max(1, int(length * (1 - range_ratio)))
        hi = max(lo, int(length * (1 + range_ratio)))
        return rng.integers(lo, hi + 1, n)

    ins, outs = draw(input_len), draw(output_len)
    out = []
    for p, o in zip(ins.tolist(), outs.tolist(), strict=True):
        if as_text:
            words = rng.integers(0, len(_WORDS), p)
            prompt: str | list[int] = " ".join(_WORDS[w] for w in words.tolist())
        else:
            prompt = rng.integers(0, 256, p).tolist()
        out.append(BenchRequest(prompt, p, o))
    return out


def sharegpt_requests(
    path: Path, n: int, rng: np.random.Generator, output_len: int | None
) -> list[BenchRequest]:
    try:
        data = json.loads(read_bytes(Path(path), max_line=None))
    except (OSError, ValueError, TidalError) as err:
        raise ConfigError("dataset-path", f"cannot read ShareGPT JSON {path}: {err}") from None
    pairs = []
    for conv in data if isinstance(data, list) else []:
        turns = conv.get("conversations") if isinstance(conv, dict) else None
        if not isinstance(turns, list) or len(turns) < 2:
            continue
        if not (isinstance(turns[0], dict) and isinstance(turns[1], dict)):
            continue
        prompt, reply = turns[0].get("value"), turns[1].get("value")
        if isinstance(prompt, str) and isinstance(reply, str) and prompt:
            pairs.append((prompt, reply))
    if not pairs:
        raise ConfigError(
            "dataset-path",
            f"{path} holds no conversation with two turns",
            'give ShareGPT JSON: [{"conversations": [{"from": "human", "value": ...}, ...]}]',
        )
    order = rng.permutation(len(pairs))
    out = []
    for i in order[: min(n, len(pairs))].tolist():
        prompt, reply = pairs[i]
        est = max(1, len(reply.encode()) // BYTES_PER_TOKEN)
        out.append(
            BenchRequest(prompt, max(1, len(prompt.encode()) // BYTES_PER_TOKEN), output_len or est)
        )
    return out


def trace_requests(path: Path, n: int, rng: np.random.Generator) -> list[BenchRequest]:
    rs = load_trace(path, rng=rng)
    k = min(n, len(rs))
    if k == 0:
        raise ConfigError("dataset-path", f"{path} holds no request")
    t0 = int(rs.arrival_ns[0])
    out = []
    for i in range(k):
        p = int(rs.prompt_len[i])
        out.append(
            BenchRequest(
                rng.integers(0, 256, p).tolist(),
                p,
                int(rs.output_len[i]),
                (int(rs.arrival_ns[i]) - t0) / 1e9,
            )
        )
    return out


def build_requests(
    name: str,
    n: int,
    seed: int,
    *,
    dataset_path: Path | None,
    input_len: int,
    output_len: int,
    range_ratio: float,
    sharegpt_output_len: int | None,
    chat: bool,
) -> list[BenchRequest]:
    rng = np.random.default_rng(seed)
    if n < 1:
        raise ConfigError("num-prompts", f"must be >= 1, got {n}")
    if name == "random":
        return random_requests(n, input_len, output_len, range_ratio, rng, as_text=chat)
    if name in ("sharegpt", "trace") and dataset_path is None:
        raise ConfigError("dataset-path", f"dataset {name!r} needs --dataset-path")
    if name == "sharegpt":
        assert dataset_path is not None
        return sharegpt_requests(dataset_path, n, rng, sharegpt_output_len)
    if name == "trace":
        assert dataset_path is not None
        if chat:
            raise ConfigError("endpoint", "the trace dataset sends token ids: use /v1/completions")
        return trace_requests(dataset_path, n, rng)
    raise ConfigError("dataset-name", f"unknown dataset {name!r}", "valid: " + ", ".join(DATASETS))
