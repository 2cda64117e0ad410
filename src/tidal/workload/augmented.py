"""Augmented (tool-calling) workloads: INFERCEPT's six augmentation types, the synthetic
call-time families, and the request set that carries each request's segments.

Per-type statistics (``docs/research/augserve.md`` §1.2, INFERCEPT Table 1 as recalled there,
[REC]): mean call time, mean number of calls and mean context length per request:

==========  ===============  ============  ==========  =================================
type        mean call (s)    mean calls    context     returned tokens per call
==========  ===============  ============  ==========  =================================
calculator  9e-5             3.75          1.4k        4–16 (a number)
qa          0.72             2.5           1.8k        64–256 (a Wikipedia passage)
ve          0.09             28            2.2k        16–48 (an observation) [1]
chatbot     28.6             4.5           0.75k       16–64 (the user's next turn) [1]
image       20.0             6.9           1.2k        16–64
tts         17.2             6.9           1.25k       16–64
==========  ===============  ============  ==========  =================================

The per-segment decode lengths and the returned-token ranges are not published
(``docs/research/augserve.md`` §5 Q7); the ranges above follow the note's defaults except [1],
narrowed so that the mean context
matches the table (28 calls × 32–128 returned tokens alone would exceed VE's 2.2k; a 32–256
token next turn would double the chatbot's 0.75k). Each type then draws, per request:

- the prompt ``P ~ U[lo, hi]`` (few-shot prompts for the tool-using types);
- the number of calls ``K = 1 + Poisson(mean − 1)`` (mean exactly the table's);
- per segment ``g ~ U[lo, hi]`` decoded tokens and per call ``a ~ U[lo, hi]`` returned ones;
- per call ``T ~ LogNormal`` with the table's mean and shape ``σ = 0.5`` (or a synthetic
  family, below).

so that ``E[P + Σg + Σa]`` is the table's context (a test checks the sampled means).

Synthetic call-time families of INFERCEPT's driver (``generate_exec_times`` in
``benchmarks/final_tput_bench_real.py``, docs/research/augserve.md §1.3), drawn per call in seconds:
``N = |Normal(11, 3)|``, ``U = Uniform(0.1, 20)``, ``R = Gamma(shape 0.5, scale 4)`` (short),
``L = |20 − R|`` (long), ``B`` = L or R with probability ½ each (bimodal).

The mixture ``infercept-mix`` draws each request's type uniformly (INFERCEPT's
``merged_exp_uniform.json`` samples the six types uniformly, keys drawn with replacement).
Arrivals are Poisson at ``rate`` (first at t = 0; INFERCEPT injects ``⌊qps⌋ + 1`` requests
at t = 0, which we do not copy). Every request is capped to ``max_context`` tokens
(INFERCEPT caps the context at 2048) by :func:`cap_context`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tidal.core.augmented import TOOLS, AugmentedSpec, ToolCall
from tidal.core.errors import ConfigError
from tidal.core.units import NS_PER_S
from tidal.workload.arrivals import arrival_times
from tidal.workload.base import RequestSet


@dataclass(frozen=True)
class AugmentationType:
    name: str
    mean_call_s: float
    mean_calls: float
    mean_context: int
    """Mean final context (prompt + decoded + returned), before the context cap."""
    prompt: tuple[int, int]
    decode: tuple[int, int]
    """Decoded tokens per segment (uniform range)."""
    ret: tuple[int, int]
    """Tokens returned per call (uniform range)."""

    @property
    def tool(self) -> int:
        return TOOLS.index(self.name)

    def expected_context(self) -> float:
        mid = lambda r: (r[0] + r[1]) / 2  # noqa: E731
        k = self.mean_calls
        return mid(self.prompt) + (k + 1) * mid(self.decode) + k * mid(self.ret)


AUGMENTATION_TYPES: dict[str, AugmentationType] = {
    t.name: t
    for t in (
        AugmentationType("calculator", 9e-5, 3.75, 1400, (900, 1300), (30, 80), (4, 16)),
        AugmentationType("qa", 0.72, 2.5, 1800, (1060, 1460), (20, 60), (64, 256)),
        AugmentationType("ve", 0.09, 28.0, 2200, (700, 1100), (6, 20), (16, 48)),
        AugmentationType("chatbot", 28.6, 4.5, 750, (40, 220), (40, 120), (16, 64)),
        AugmentationType("image", 20.0, 6.9, 1200, (330, 730), (30, 70), (16, 64)),
        AugmentationType("tts", 17.2, 6.9, 1250, (380, 780), (30, 70), (16, 64)),
    )
}
CALL_TIME_SIGMA = 0.5
CALL_TIME_FAMILIES = ("type", "N", "U", "R", "L", "B")


def call_times_s(family: str, n: int, rng: np.random.Generator, mean_s: float = 1.0) -> np.ndarray:
    """``n`` call durations in seconds: the type's lognormal (``family='type'``, mean
    ``mean_s``, σ = :data:`CALL_TIME_SIGMA`) or one of INFERCEPT's synthetic families."""
    if family == "type":
        mu = math.log(mean_s) - CALL_TIME_SIGMA**2 / 2
        return rng.lognormal(mu, CALL_TIME_SIGMA, size=n)
    if family == "N":
        return np.abs(rng.normal(11.0, 3.0, size=n))
    if family == "U":
        return rng.uniform(0.1, 20.0, size=n)
    right = np.abs(rng.gamma(0.5, 4.0, size=n))
    if family == "R":
        return right
    if family == "L":
        return np.abs(20.0 - right)
    if family == "B":
        return np.where(rng.random(n) < 0.5, np.abs(20.0 - right), right)
    raise ConfigError(
        "workload.call_time_dist",
        f"unknown value {family!r}",
        "valid: " + ", ".join(CALL_TIME_FAMILIES),
    )


def sample_request(
    kind: AugmentationType, rng: np.random.Generator, call_time_dist: str = "type"
) -> tuple[int, AugmentedSpec]:
    """One request of type ``kind``: (prompt length, segments)."""
    prompt = int(rng.integers(kind.prompt[0], kind.prompt[1] + 1))
    k = 1 + int(rng.poisson(kind.mean_calls - 1.0))
    g = rng.integers(kind.decode[0], kind.decode[1] + 1, size=k + 1)
    a = rng.integers(kind.ret[0], kind.ret[1] + 1, size=k)
    t = call_times_s(call_time_dist, k, rng, kind.mean_call_s)
    t_ns = np.maximum(np.rint(t * NS_PER_S), 0).astype(np.int64)
    calls = tuple(ToolCall(int(g[i]), int(t_ns[i]), int(a[i])) for i in range(k))
    return prompt, AugmentedSpec(calls, int(g[k]), kind.tool)


def cap_context(
    prompt: int, spec: AugmentedSpec, max_context: int | None
) -> tuple[int, AugmentedSpec]:
    """Truncate a request so that its final context is at most ``max_context`` tokens: the
    prompt keeps at most ``max_context − 1`` tokens; the first call whose decode plus returned
    tokens would leave no room for one more decoded token becomes the final segment (its
    decode cut to fit) and later calls are dropped. Identity when everything fits."""
    if max_context is None or spec.total_context(prompt) <= max_context:
        return prompt, spec
    if max_context < 2:
        raise ConfigError("workload.max_context", "must be at least 2 tokens")
    prompt = min(prompt, max_context - 1)
    ctx = prompt
    calls: list[ToolCall] = []
    for c in spec.calls:
        if ctx + c.decode_tokens + c.return_tokens + 1 > max_context:
            return prompt, AugmentedSpec(
                tuple(calls), max(1, min(c.decode_tokens, max_context - ctx)), spec.tool
            )
        calls.append(c)
        ctx += c.decode_tokens + c.return_tokens
    final = max(1, min(spec.final_decode, max_context - ctx))
    return prompt, AugmentedSpec(tuple(calls), final, spec.tool)


def parse_types(name: str) -> list[AugmentationType]:
    """``infercept-mix`` → all six; ``infercept:qa,ve`` → those types."""
    if name == "infercept-mix":
        return list(AUGMENTATION_TYPES.values())
    if name.startswith("infercept:"):
        out = []
        for t in name.split(":", 1)[1].split(","):
            if t.strip() not in AUGMENTATION_TYPES:
                raise ConfigError(
                    "workload.augmented",
                    f"unknown augmentation type {t!r}",
                    "valid: " + ", ".join(AUGMENTATION_TYPES),
                )
            out.append(AUGMENTATION_TYPES[t.strip()])
        return out
    raise ConfigError(
        "workload.augmented",
        f"unknown augmented workload {name!r}",
        "use infercept-mix, infercept:TYPE[,TYPE…] or augmented:FILE.jsonl",
    )


def request_set_of(
    arrivals: np.ndarray,
    prompts: list[int],
    specs: list[AugmentedSpec],
    source: str,
) -> RequestSet:
    """Columns of an augmented workload: ``output_len`` = Σ decoded tokens, plus ``num_calls``,
    ``call_ns`` (Σ call time), ``return_tokens`` (Σ returned) and ``tool``; the segments go to
    ``payloads``."""
    n = len(specs)
    return RequestSet(
        np.asarray(arrivals, dtype=np.int64),
        np.asarray(prompts, dtype=np.int64),
        np.fromiter((s.total_decode for s in specs), dtype=np.int64, count=n),
        source,
        {
            "num_calls": np.fromiter((s.num_calls for s in specs), dtype=np.int64, count=n),
            "call_ns": np.fromiter((s.call_ns for s in specs), dtype=np.int64, count=n),
            "return_tokens": np.fromiter((s.total_return for s in specs), dtype=np.int64, count=n),
            "tool": np.fromiter((s.tool for s in specs), dtype=np.int64, count=n),
        },
        tuple(specs),
    )


def generate_mixture(
    types: list[AugmentationType],
    n: int,
    rate: float,
    rng: np.random.Generator,
    *,
    arrival_cv: float = 1.0,
    call_time_dist: str = "type",
    max_context: int | None = 2048,
) -> RequestSet:
    """``n`` requests, types drawn uniformly from ``types``, arrivals at ``rate`` req/s."""
    arrivals = arrival_times(n, rate, arrival_cv, rng)
    which = rng.integers(0, len(types), size=n)
    prompts: list[int] = []
    specs: list[AugmentedSpec] = []
    for i in range(n):
        p, s = sample_request(types[int(which[i])], rng, call_time_dist)
        p, s = cap_context(p, s, max_context)
        prompts.append(p)
        specs.append(s)
    names = ",".join(t.name for t in types)
    process = "poisson" if arrival_cv == 1.0 else f"gamma cv {arrival_cv:g}"
    source = (
        f"augmented: {n} requests of [{names}], {process} at {rate:g} req/s, "
        f"call times {call_time_dist}, context ≤ {max_context}"
    )
    return request_set_of(arrivals, prompts, specs, source)
