"""What a scheduler may know of an augmented request before it happens (docs/research/augserve.md
§3.6).

AugServe predicts, on arrival, the output-length *range* and the call durations with a small
BERT model; the simulator replaces the model by a predictor of controlled quality:

==========  ==========================  ========================  ====================
name        output length Ĝ             call durations T̂_k        returned tokens Â_k
==========  ==========================  ========================  ====================
oracle      true G                      true T_k                  true a_k
noisy       true bucket with prob. p,   T_k · LogNormal(0, σ)     per-tool mean
            else an adjacent one;
            the bucket's midpoint
mean        per-tool mean               per-tool mean             per-tool mean
none        nothing (constant value: AugServe's ordering degenerates to FCFS by arrival)
==========  ==========================  ========================  ====================

Buckets: [1, 64), [64, 128), [128, 256), …, doubling. The number of calls K is known to
``oracle`` and ``noisy`` (they perturb lengths and durations, not the structure) and is the
per-tool mean for ``mean``. Per-tool means start from the augmentation-type table
(:mod:`tidal.workload.augmented`) and are updated with every observed call and completion, so
``mean`` is what a deployment without a learned model could do. Noise is drawn from a
generator seeded by ``(seed, request id)``: a request gets the same prediction under every
policy and in any event order.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np

from tidal.core.augmented import TOOLS, AugmentedSpec
from tidal.core.registry import Registry
from tidal.core.request import Request
from tidal.workload.augmented import AUGMENTATION_TYPES

BUCKET_EDGES: tuple[int, ...] = tuple([1] + [64 << i for i in range(12)])
"""Output-length bucket edges: [1, 64), [64, 128), [128, 256), … (docs/research/augserve.md
§3.6)."""


def bucket_of(n: float) -> int:
    """Index b with ``BUCKET_EDGES[b] ≤ n < BUCKET_EDGES[b + 1]``."""
    for b in range(len(BUCKET_EDGES) - 1):
        if n < BUCKET_EDGES[b + 1]:
            return b
    return len(BUCKET_EDGES) - 2


def bucket_mid(b: int) -> float:
    return (BUCKET_EDGES[b] + BUCKET_EDGES[b + 1]) / 2


def bucket_upper(n: float) -> int:
    """The upper edge of ``n``'s bucket (Stage II re-buckets a request that outgrew Ĝ)."""
    return BUCKET_EDGES[bucket_of(n) + 1]


@dataclass(frozen=True, slots=True)
class Prediction:
    output_tokens: float
    """Ĝ: total decoded tokens."""
    call_s: tuple[float, ...]
    """T̂_k for each predicted call (its length is K̂)."""
    return_tokens: tuple[float, ...]
    """Â_k for each predicted call."""

    @property
    def num_calls(self) -> int:
        return len(self.call_s)


NO_PREDICTION = Prediction(0.0, (), ())


class ToolStats:
    """Per-tool running means (prior = the type table, counted as one observation)."""

    def __init__(self) -> None:
        n = len(TOOLS)
        self.call_s = [1.0] * n
        self.ret = [64.0] * n
        self.calls = [3.0] * n
        self.output = [256.0] * n
        for t in AUGMENTATION_TYPES.values():
            i = t.tool
            self.call_s[i] = t.mean_call_s
            self.ret[i] = (t.ret[0] + t.ret[1]) / 2
            self.calls[i] = t.mean_calls
            self.output[i] = (t.mean_calls + 1) * (t.decode[0] + t.decode[1]) / 2
        self._n_call = [1] * n
        self._n_req = [1] * n

    def observe_call(self, tool: int, call_s: float, ret: int) -> None:
        self._n_call[tool] += 1
        k = self._n_call[tool]
        self.call_s[tool] += (call_s - self.call_s[tool]) / k
        self.ret[tool] += (ret - self.ret[tool]) / k

    def observe_finish(self, tool: int, num_calls: int, output: int) -> None:
        self._n_req[tool] += 1
        k = self._n_req[tool]
        self.calls[tool] += (num_calls - self.calls[tool]) / k
        self.output[tool] += (output - self.output[tool]) / k


class Predictor(ABC):
    name = "base"

    def __init__(self, seed: int = 0, p: float = 0.8, sigma: float = 0.3) -> None:
        self.seed = seed
        self.p = p
        self.sigma = sigma
        self.stats = ToolStats()

    @abstractmethod
    def predict(self, req: Request) -> Prediction:
        """Stage I prediction, made once on arrival."""

    def call_s(self, req: Request, pred: Prediction, k: int) -> float:
        """Predicted duration of call ``k`` (used while the call runs: INFERCEPT's remaining
        time ``T̂ − elapsed``). Falls back to the per-tool mean."""
        if k < len(pred.call_s):
            return pred.call_s[k]
        return self.stats.call_s[_tool(req)]

    def observe_call(self, req: Request, call_s: float, ret: int) -> None:
        self.stats.observe_call(_tool(req), call_s, ret)

    def observe_finish(self, req: Request) -> None:
        spec = req.payload
        calls = spec.num_calls if isinstance(spec, AugmentedSpec) else 0
        self.stats.observe_finish(_tool(req), calls, req.num_output_tokens)


def _tool(req: Request) -> int:
    spec = req.payload
    return spec.tool if isinstance(spec, AugmentedSpec) else len(TOOLS) - 1


def _spec(req: Request) -> AugmentedSpec | None:
    return req.payload if isinstance(req.payload, AugmentedSpec) else None


PREDICTORS: Registry[type[Predictor]] = Registry("predictor")


@PREDICTORS.register("oracle")
class OraclePredictor(Predictor):
    """The truth (an upper bound on what prediction can give)."""

    name = "oracle"

    def predict(self, req: Request) -> Prediction:
        spec = _spec(req)
        if spec is None:
            return Prediction(float(req.max_output_len), (), ())
        return Prediction(
            float(spec.total_decode),
            tuple(c.duration_ns / 1e9 for c in spec.calls),
            tuple(float(c.return_tokens) for c in spec.calls),
        )


@PREDICTORS.register("noisy")
class NoisyPredictor(Predictor):
    """Bucketed output length right with probability ``p`` (else an adjacent bucket, up or down
    with equal chance, the only neighbour at the ends); call times × LogNormal(0, σ); returned
    tokens the per-tool mean."""

    name = "noisy"

    def predict(self, req: Request) -> Prediction:
        rng = np.random.default_rng([self.seed, req.request_id])
        spec = _spec(req)
        g = spec.total_decode if spec is not None else req.max_output_len
        b = bucket_of(g)
        if rng.random() >= self.p:
            last = len(BUCKET_EDGES) - 2
            step = -1 if rng.random() < 0.5 else 1
            if b == 0:
                step = 1
            elif b == last:
                step = -1
            b += step
        if spec is None:
            return Prediction(bucket_mid(b), (), ())
        noise = rng.lognormal(0.0, self.sigma, size=spec.num_calls) if self.sigma else None
        calls = tuple(
            c.duration_ns / 1e9 * (float(noise[i]) if noise is not None else 1.0)
            for i, c in enumerate(spec.calls)
        )
        ret = self.stats.ret[spec.tool]
        return Prediction(bucket_mid(b), calls, tuple(ret for _ in spec.calls))


@PREDICTORS.register("mean")
class MeanPredictor(Predictor):
    """Per-tool running means of output length, number of calls, call time, returned tokens."""

    name = "mean"

    def predict(self, req: Request) -> Prediction:
        t = _tool(req)
        s = self.stats
        k = max(0, round(s.calls[t])) if _spec(req) is not None else 0
        return Prediction(s.output[t], tuple(s.call_s[t] for _ in range(k)), (s.ret[t],) * k)


@PREDICTORS.register("none")
class NoPredictor(Predictor):
    """No prediction: AugServe's value is a constant (FCFS by arrival, plus the budget)."""

    name = "none"

    def predict(self, req: Request) -> Prediction:
        return NO_PREDICTION

    def call_s(self, req: Request, pred: Prediction, k: int) -> float:
        return self.stats.call_s[_tool(req)]
