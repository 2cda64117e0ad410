"""Token sampling: greedy, or temperature with optional top-k and nucleus (top-p) truncation.

Temperature sampling uses the Gumbel-max trick, ``argmax(logits/T + g)`` with
``g = −log(−log u)``, ``u ~ U(0, 1)`` drawn from a per-request generator: a request's tokens
depend on its seed and its logits only, never on which other requests share the step.
Truncation runs in vLLM's order: top-k keeps the k largest logits, then top-p keeps the smallest
set of most likely tokens whose (renormalised) probability reaches p (Holtzman et al. 2020), by
setting the others' logits to −∞ first. ``min_tokens`` masks the ``suppress_ids`` (the request's
stop tokens) to −∞ while fewer than ``min_tokens`` tokens have been generated, greedy or not, so
no stop token can be sampled before then (vLLM's ``min_tokens``).

Logprobs (``logprobs`` = k, vLLM's default "raw" mode): the log-softmax of the model's logits,
before temperature, truncation and ``min_tokens`` masking; for each sampled token its own
logprob and the k most likely (id, logprob) pairs are appended to the request's
``logprob_sink`` (:func:`record_logprobs`), in the order the tokens are sampled.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

SEED_MIN = -(1 << 63)
SEED_MAX = (1 << 63) - 1
"""Seeds are signed 64-bit integers (vLLM's range; ``torch.Generator.manual_seed`` takes them)."""


@dataclass(frozen=True, slots=True)
class SamplingParams:
    temperature: float = 0.0
    """0 = greedy."""
    top_p: float = 1.0
    seed: int | None = None
    """Seed of the request's generator (default: derived from the engine seed and request id)."""
    top_k: int = 0
    """Keep the k most likely tokens; 0 (or -1, vLLM's spelling) keeps all."""
    min_tokens: int = 0
    """Tokens generated before any of ``suppress_ids`` may be sampled."""
    suppress_ids: tuple[int, ...] = ()
    logprobs: int | None = None
    """Top logprobs recorded per sampled token (0: the sampled token's only); None: none."""
    logprob_sink: list[TokenLogprobs] | None = field(default=None, compare=False, repr=False)
    """Where the runner appends one :data:`TokenLogprobs` per sampled token (the caller's list,
    read by the caller as the tokens arrive; set with ``logprobs``)."""

    def __post_init__(self) -> None:
        if not self.temperature >= 0:  # also refuses NaN
            raise ValueError("temperature must be >= 0")
        if not 0 < self.top_p <= 1:
            raise ValueError("top_p must be in (0, 1]")
        if self.seed is not None and not SEED_MIN <= self.seed <= SEED_MAX:
            raise ValueError(f"seed must be in [{SEED_MIN}, {SEED_MAX}] (a signed 64-bit integer)")
        if self.top_k < -1:
            raise ValueError("top_k must be -1 or 0 (all tokens) or >= 1")
        if self.min_tokens < 0:
            raise ValueError("min_tokens must be >= 0")
        if self.logprobs is not None and (self.logprobs < 0 or self.logprob_sink is None):
            raise ValueError("logprobs must be >= 0 and come with a logprob_sink")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    @property
    def is_default_greedy(self) -> bool:
        """Plain argmax: nothing for the runner to remember about this request."""
        return (
            self.greedy and not (self.min_tokens and self.suppress_ids) and self.logprobs is None
        )


GREEDY = SamplingParams()

TokenLogprobs = tuple[float, list[tuple[int, float]]]
"""(the sampled token's logprob, the top (id, logprob) pairs, most likely first)."""
NEG_INF_LOGPROB = -9999.0
"""A logprob of −∞ (a token the model cannot emit) as JSON can carry it (vLLM's value)."""


def _finite(x: float) -> float:
    return x if math.isfinite(x) else NEG_INF_LOGPROB


def record_logprobs(
    logits: torch.Tensor, params: list[SamplingParams], tokens: list[int]
) -> None:
    """Append each row's :data:`TokenLogprobs` to its request's sink (rows that asked only)."""
    rows = [i for i, p in enumerate(params) if p.logprobs is not None]
    if not rows:
        return
    lp = logits[rows].float().log_softmax(-1).cpu()
    chosen = lp[torch.arange(len(rows)), torch.tensor([tokens[i] for i in rows])].tolist()
    k = max(params[i].logprobs or 0 for i in rows)
    top_v, top_i = lp.topk(min(k, lp.shape[-1]), dim=-1) if k else (None, None)
    for j, i in enumerate(rows):
        p = params[i]
        top: list[tuple[int, float]] = []
        if p.logprobs and top_v is not None and top_i is not None:
            ids, vals = top_i[j, : p.logprobs].tolist(), top_v[j, : p.logprobs].tolist()
            top = [(int(t), _finite(v)) for t, v in zip(ids, vals, strict=True)]
        assert p.logprob_sink is not None
        p.logprob_sink.append((_finite(chosen[j]), top))


def _top_k(logits: torch.Tensor, k: int) -> torch.Tensor:
    if k <= 0 or k >= logits.shape[-1]:
        return logits
    kth = logits.topk(k).values[-1]
    return logits.masked_fill(logits < kth, float("-inf"))


def _top_p(logits: torch.Tensor, p: float) -> torch.Tensor:
    sorted_logits, order = logits.sort(descending=True)
    probs = sorted_logits.softmax(-1)
    before = probs.cumsum(-1) - probs  # mass strictly above each token
    sorted_logits[before >= p] = float("-inf")
    out = torch.empty_like(logits)
    out[order] = sorted_logits
    return out


def sample(
    logits: torch.Tensor,
    params: list[SamplingParams],
    generators: list[torch.Generator | None],
    num_outputs: list[int] | None = None,
) -> list[int]:
    """One token per row of ``logits`` (``[rows, vocab]``, float32, on any device);
    ``num_outputs[i]``: tokens row i's request has generated so far (for ``min_tokens``)."""
    masked = [
        i
        for i, p in enumerate(params)
        if p.suppress_ids and (num_outputs is None or num_outputs[i] < p.min_tokens)
    ]
    if masked:
        logits = logits.clone()
        for i in masked:
            logits[i, list(params[i].suppress_ids)] = float("-inf")
    if all(p.greedy for p in params):
        return logits.argmax(-1).tolist()
    out: list[int] = []
    greedy_ids = logits.argmax(-1).tolist()
    for i, (p, gen) in enumerate(zip(params, generators, strict=True)):
        if p.greedy or gen is None:
            out.append(greedy_ids[i])
            continue
        row = _top_k(logits[i].cpu() / p.temperature, p.top_k)
        if p.top_p < 1.0:
            row = _top_p(row, p.top_p)
        u = torch.rand(row.shape, generator=gen, dtype=torch.float32).clamp_(1e-20, 1.0)
        out.append(int((row - torch.log(-torch.log(u))).argmax()))
    return out
