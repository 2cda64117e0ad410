"""Prompt/output length distributions: ``(prompt, output)`` int64 arrays of size n, all ≥ 1.

``L`` below is ``prompt_len`` for prompts and ``output_len`` for outputs; "round" is half up,
``⌊x + 0.5⌋``. Prompts are drawn first, then outputs, from the same generator.

- ``fixed``: exactly L.
- ``uniform``: integers uniform on ``[max(1, round(L(1−j))), max(lo, round(L(1+j)))]``
  (inclusive), j = ``jitter``; mean L up to rounding.
- ``uniform-below``: integers uniform on ``[max(1, ⌊L(1−j)⌋), L]`` (inclusive): the random
  dataset of ``benchmark_serving.py`` with ``--random-range-ratio 1 − j`` as InferenceX runs
  it (its ``sample_uniform``; 0.8 there, i.e. j = 0.2); mean ≈ L(1 − j/2). vLLM's current
  ``--random-range-ratio r`` is ``uniform`` with j = r.
- ``geometric``: support 1, 2, …, ``p = 1/L``, mean L (L = 1 gives all ones).
- ``lognormal``: ``round(exp(N(ln L, σ²)))`` floored at 1; median L, mean ≈ L·exp(σ²/2).
- ``empirical:NAME`` (``sharegpt``, ``arxiv``, ``bwb``) or ``empirical:PATH``: rows of a CSV
  with ``num_prefill_tokens,num_decode_tokens`` drawn uniformly with replacement; prompt and
  output come from the same row (joint). L is ignored.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from tidal.core.errors import ConfigError, unknown_name
from tidal.workload._io import int_column, read_bytes, read_csv_strings
from tidal.workload.paths import resolve_trace

if TYPE_CHECKING:
    from tidal.workload.config import WorkloadConfig

EMPIRICAL = {
    # The 8k-filtered ShareGPT table of the Vidur / Sarathi-Serve line of work (Vidur's configs
    # name it; the file is etalon's data/processed_traces/, Llama-2 tokenizer): each row is a
    # whole conversation, prompt + output ≤ 8,192 and output ≤ 1,024 tokens; 30,731 rows,
    # mean 2,340 prompt / 439 output tokens. vLLM's `bench serve --dataset-name sharegpt`
    # instead sends the *first turn* of ShareGPT_V3 conversations (prompt ≤ 1,024, prompt +
    # output ≤ 2,048: ~200/200 tokens); that set is not bundled — give its lengths as
    # empirical:PATH, or replay it against a server with `tidal bench serve`.
    "sharegpt": "length_distributions/sharegpt_8k_filtered_stats_llama2_tokenizer.csv.gz",
    "arxiv": "length_distributions/arxiv_summarization_stats_llama2_tokenizer_filtered_v2.csv.gz",
    "bwb": "length_distributions/bwb_stats_llama2_tokenizer_filtered_v2.csv.gz",
}
"""Names accepted by ``empirical:NAME``, as paths relative to the traces directory."""
DISTRIBUTIONS = (
    "fixed",
    "uniform",
    "uniform-below",
    "geometric",
    "lognormal",
    "empirical:<name or path>",
)
PROMPT_COL = "num_prefill_tokens"
OUTPUT_COL = "num_decode_tokens"
_MAX_LEN = 2**40


def round_half_up(x: np.ndarray) -> np.ndarray:
    """``⌊x + 0.5⌋`` as int64, at least 1 (values are capped at 2**40 to stay in range)."""
    return np.clip(np.floor(np.asarray(x, dtype=np.float64) + 0.5), 1, _MAX_LEN).astype(np.int64)


def fixed_lengths(n: int, length: int) -> np.ndarray:
    return np.full(n, length, dtype=np.int64)


def uniform_bounds(length: int, jitter: float) -> tuple[int, int]:
    """Inclusive ``(lo, hi)`` of the uniform distribution around ``length``."""
    lo = max(1, int(np.floor(length * (1.0 - jitter) + 0.5)))
    hi = max(lo, int(np.floor(length * (1.0 + jitter) + 0.5)))
    return lo, hi


def uniform_lengths(n: int, length: int, jitter: float, rng: np.random.Generator) -> np.ndarray:
    lo, hi = uniform_bounds(length, jitter)
    return rng.integers(lo, hi + 1, size=n, dtype=np.int64)


def uniform_below_lengths(
    n: int, length: int, jitter: float, rng: np.random.Generator
) -> np.ndarray:
    """Integers uniform on ``[max(1, ⌊length·(1 − jitter)⌋), length]``."""
    lo = max(1, int(length * (1.0 - jitter)))
    return rng.integers(lo, length + 1, size=n, dtype=np.int64)


def geometric_lengths(n: int, mean: float, rng: np.random.Generator) -> np.ndarray:
    if mean < 1:
        raise ValueError(f"geometric mean must be ≥ 1, got {mean}")
    return rng.geometric(1.0 / mean, size=n).astype(np.int64)


def lognormal_lengths(n: int, median: float, sigma: float, rng: np.random.Generator) -> np.ndarray:
    return round_half_up(rng.lognormal(np.log(median), sigma, size=n))


@functools.lru_cache(maxsize=8)
def _load_table(path: str) -> tuple[np.ndarray, np.ndarray]:
    df = read_csv_strings(read_bytes(Path(path)), path, [PROMPT_COL, OUTPUT_COL])
    prompt = int_column(df, PROMPT_COL, path)
    output = int_column(df, OUTPUT_COL, path)
    prompt.flags.writeable = False
    output.flags.writeable = False
    return prompt, output


def length_table(name_or_path: str) -> tuple[np.ndarray, np.ndarray]:
    """(prompt, output) columns of an empirical length file (cached, read-only arrays)."""
    rel = EMPIRICAL.get(name_or_path, name_or_path)
    path = resolve_trace(rel, field="length_dist")
    prompt, output = _load_table(str(path))
    if len(prompt) == 0:
        raise ConfigError("length_dist", f"{path} has no rows", "use a non-empty CSV")
    return prompt, output


def empirical_lengths(
    name_or_path: str, n: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    prompt, output = length_table(name_or_path)
    idx = rng.integers(0, len(prompt), size=n)
    return prompt[idx], output[idx]


def sample_lengths(
    dist: str,
    n: int,
    rng: np.random.Generator,
    *,
    prompt_len: int,
    output_len: int,
    jitter: float = 0.5,
    sigma: float = 1.0,
) -> tuple[np.ndarray, np.ndarray]:
    """Draw n (prompt, output) pairs from the distribution named ``dist`` (module docstring)."""
    if dist == "fixed":
        return fixed_lengths(n, prompt_len), fixed_lengths(n, output_len)
    if dist == "uniform":
        return (
            uniform_lengths(n, prompt_len, jitter, rng),
            uniform_lengths(n, output_len, jitter, rng),
        )
    if dist == "uniform-below":
        return (
            uniform_below_lengths(n, prompt_len, jitter, rng),
            uniform_below_lengths(n, output_len, jitter, rng),
        )
    if dist == "geometric":
        return geometric_lengths(n, prompt_len, rng), geometric_lengths(n, output_len, rng)
    if dist == "lognormal":
        return (
            lognormal_lengths(n, prompt_len, sigma, rng),
            lognormal_lengths(n, output_len, sigma, rng),
        )
    if dist.startswith("empirical:") and dist != "empirical:":
        return empirical_lengths(dist.removeprefix("empirical:"), n, rng)
    raise unknown_name("length_dist", dist, DISTRIBUTIONS)


def quantile_lengths(
    quantiles: np.ndarray, values: np.ndarray, n: int, rng: np.random.Generator
) -> np.ndarray:
    """Inverse-CDF sampling from a quantile table: ``round(interp(U, q, v))``, ≥ 1.

    Linear interpolation between the tabulated quantiles; below the first and above the last
    quantile the end values are used (so the tails are no heavier than the table says).
    """
    u = rng.random(n)
    return round_half_up(np.interp(u, quantiles, values))


def config_lengths(
    cfg: WorkloadConfig, n: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """``n`` (prompt, output) pairs of a workload config's length distribution and settings."""
    return sample_lengths(
        cfg.length_dist,
        n,
        rng,
        prompt_len=cfg.prompt_len,
        output_len=cfg.output_len,
        jitter=cfg.length_jitter,
        sigma=cfg.length_sigma,
    )
