"""Token sampling: greedy, or temperature with optional nucleus (top-p) truncation.

Temperature sampling uses the Gumbel-max trick, ``argmax(logits/T + g)`` with
``g = −log(−log u)``, ``u ~ U(0, 1)`` drawn from a per-request generator: a request's tokens
depend on its seed and its logits only, never on which other requests share the step.
Top-p keeps the smallest set of most likely tokens whose probability reaches p (Holtzman et al.
2020) by setting the others' logits to −∞ first.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True, slots=True)
class SamplingParams:
    temperature: float = 0.0
    """0 = greedy."""
    top_p: float = 1.0
    seed: int | None = None
    """Seed of the request's generator (default: derived from the engine seed and request id)."""

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError("temperature must be >= 0")
        if not 0 < self.top_p <= 1:
            raise ValueError("top_p must be in (0, 1]")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


GREEDY = SamplingParams()


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
) -> list[int]:
    """One token per row of ``logits`` (``[rows, vocab]``, float32, on any device)."""
    if all(p.greedy for p in params):
        return logits.argmax(-1).tolist()
    out: list[int] = []
    greedy_ids = logits.argmax(-1).tolist()
    for i, (p, gen) in enumerate(zip(params, generators, strict=True)):
        if p.greedy or gen is None:
            out.append(greedy_ids[i])
            continue
        row = logits[i].cpu() / p.temperature
        if p.top_p < 1.0:
            row = _top_p(row, p.top_p)
        u = torch.rand(row.shape, generator=gen, dtype=torch.float32).clamp_(1e-20, 1.0)
        out.append(int((row - torch.log(-torch.log(u))).argmax()))
    return out
