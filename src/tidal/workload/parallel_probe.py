"""Parallel-Probe's controller (Zheng et al., ICML 2026, arXiv 2602.03845) over n branches.

2D probing: every ``interval`` (Δ) decoded tokens each live branch is asked for an intermediate
answer; the controller votes over the branches that are not pruned (finished ones keep voting
with their final answer). With probe step s = 0, 1, … after the first probe:

* **Deviation-based pruning** (width): from step ``warmup`` on, a live branch whose answer
  differs from the majority for ``prune_patience`` consecutive steps is pruned (stops decoding,
  frees its KV blocks); the majority is then recounted over the rest.
* **Consensus-based early stop** (depth): ``stable`` counts consecutive steps with the same
  majority answer (0 at step 0); when ``stable >= stability`` (T) every branch stops.

Defaults are the authors' main-table configuration (64 branches, T = 40, patience 7,
warm-up 15, Δ = 500 tokens; the public SCOUT evaluation, ``zhengkid/Parallel-Probe``, MIT).
Branch b of final length L_b consumes ``min(L_b, e_b·Δ)`` tokens after e_b probe calls; the
tokens of the probe prompts themselves are not charged (as in the paper's accounting).

The simulator has no answers, so they come from a seeded model (:func:`answer_matrix`): branch
b settles on its final answer at depth ``c_b = u_b·L_b`` (u_b ~ U(0, 1)); the final answer is
the consensus answer 0 with probability ``agreement``, else one of ``distractors`` wrong answers;
before c_b each probe returns an independent uniform draw among the wrong answers. Everything
the controller decides depends on depths, not times, so it is computed before the run and each
branch enters the simulator with its truncated length (exact for the token counts).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from pydantic import Field

from tidal.core.strict import StrictModel


class ParallelProbeOptions(StrictModel):
    """Controller parameters (paper defaults) and the answer model's two knobs."""

    interval: int = Field(default=500, ge=1)
    """Δ: decoded tokens between probes."""
    stability: int = Field(default=40, ge=1)
    """T: stop once the majority answer has stayed the same for T consecutive probe steps."""
    prune_patience: int = Field(default=7, ge=1)
    """Prune a branch after this many consecutive probes off the majority."""
    warmup: int = Field(default=15, ge=0)
    """No pruning before this probe step."""
    agreement: float = Field(default=0.7, ge=0, le=1)
    """Answer model: probability that a branch's final answer is the consensus answer."""
    distractors: int = Field(default=8, ge=1)
    """Answer model: number of distinct wrong answers."""


@dataclass(frozen=True)
class ProbeOutcome:
    """Per-branch tokens decoded under the controller, and why the group ended."""

    consumed: np.ndarray
    """Tokens each branch decodes (≤ its full length)."""
    stopped_early: bool
    """True when the consensus stop fired (else every branch finished or was pruned)."""
    pruned: np.ndarray
    """Boolean mask of pruned branches."""


def answer_matrix(
    lengths: np.ndarray, opts: ParallelProbeOptions, rng: np.random.Generator
) -> np.ndarray:
    """Answers ``A[b, e-1]`` returned after e probe calls (e = 1 … ⌈L_b/Δ⌉): the final answer
    once e·Δ ≥ c_b (always at the last call), else a fresh wrong answer (module docstring)."""
    lengths = np.asarray(lengths, np.int64)
    calls = -(-lengths // opts.interval)
    width = int(calls.max()) if len(calls) else 0
    settle = rng.random(len(lengths)) * lengths
    correct = rng.random(len(lengths)) < opts.agreement
    wrong = rng.integers(1, opts.distractors + 1, size=len(lengths))
    final = np.where(correct, 0, wrong)
    noise = rng.integers(1, opts.distractors + 1, size=(len(lengths), width))
    depth = (np.arange(width) + 1)[None, :] * opts.interval
    settled = (depth >= settle[:, None]) | (depth >= lengths[:, None])
    return np.where(settled, final[:, None], noise)


def _majority(answers: list[int]) -> int:
    """Most frequent answer; ties go to the one seen first (as ``Counter.most_common``)."""
    counts: dict[int, int] = {}
    for a in answers:
        counts[a] = counts.get(a, 0) + 1
    return max(counts, key=lambda a: counts[a])  # max keeps the first of equal keys


def run_controller(
    lengths: np.ndarray, answers: np.ndarray, opts: ParallelProbeOptions
) -> ProbeOutcome:
    """Parallel-Probe over one group of branches (module docstring); ``answers[b, e-1]`` is
    branch b's answer after e probe calls."""
    lengths = np.asarray(lengths, np.int64)
    n, delta = len(lengths), opts.interval
    calls = np.ones(n, np.int64)  # the first probe of every branch
    pruned = np.zeros(n, bool)
    off_track = np.zeros(n, np.int64)
    prev: int | None = None
    stable, step, early = 0, 0, False
    while True:
        finished = calls * delta >= lengths
        if bool(np.all(finished | pruned)):
            break
        calls[~pruned & ~finished] += 1
        finished = calls * delta >= lengths
        live = np.flatnonzero(~pruned)
        current = answers[np.arange(n), calls - 1]
        winner = _majority([int(current[b]) for b in live])
        if step >= opts.warmup and len(live) > 1:
            for b in live:
                if finished[b]:
                    continue
                off_track[b] = off_track[b] + 1 if current[b] != winner else 0
                if off_track[b] >= opts.prune_patience:
                    pruned[b] = True
            live = np.flatnonzero(~pruned)
            if len(live) == 0:
                break
            winner = _majority([int(current[b]) for b in live])
        stable = stable + 1 if winner == prev else 0
        prev = winner
        if stable >= opts.stability:
            early = True
            break
        step += 1
    return ProbeOutcome(np.minimum(lengths, calls * delta), early, pruned)


def probe_groups(
    lengths: np.ndarray, opts: ParallelProbeOptions, rng: np.random.Generator
) -> np.ndarray:
    """Tokens decoded per branch for a ``(prompts, n)`` array of full branch lengths."""
    lengths = np.asarray(lengths, np.int64)
    out = np.empty_like(lengths)
    for g in range(lengths.shape[0]):
        row = lengths[g]
        out[g] = run_controller(row, answer_matrix(row, opts, rng), opts).consumed
    return np.maximum(out, 1)


def token_savings(full: np.ndarray, consumed: np.ndarray) -> tuple[float, float]:
    """(sequential, total) fractions saved against all branches to completion, for
    ``(prompts, n)`` arrays: sequential = Σ_prompts max over branches, total = Σ all."""
    seq = 1.0 - float(consumed.max(axis=1).sum()) / float(full.max(axis=1).sum())
    tot = 1.0 - float(consumed.sum()) / float(full.sum())
    return seq, tot
