"""Token sampling: greedy, or temperature with optional top-k and nucleus (top-p) truncation.

Temperature sampling uses the Gumbel-max trick, ``argmax(logits/T + g)`` with
``g = −log(−log u)``, ``u ~ U(0, 1)`` drawn from a per-request generator: a request's tokens
depend on its seed and its logits only, never on which other requests share the step.
Truncation runs in vLLM's order: top-k keeps the k largest logits, then top-p keeps the smallest
set of most likely tokens whose (renormalised) probability reaches p (Holtzman et al. 2020), by
setting the others' logits to −∞ first. ``min_tokens`` masks the ``suppress_ids`` (the request's
stop tokens) to −∞ while fewer than ``min_tokens`` tokens have been generated, greedy or not, so
no stop token can be sampled before then (vLLM's ``min_tokens``).
"""

from __future__ import annotations

from dataclasses import dataclass

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

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    @property
    def is_default_greedy(self) -> bool:
        """Plain argmax: nothing for the runner to remember about this request."""
        return self.greedy and not (self.min_tokens and self.suppress_ids)


GREEDY = SamplingParams()


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
