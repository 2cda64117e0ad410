"""Pipeline parallelism as vLLM V1 runs it (``--pipeline-parallel-size``; docs/design/
pipeline-parallel.md).

The model's layers are split over ``p`` stages of ``tp`` GPUs each (vLLM's ``get_pp_indices``:
⌊L/p⌋ layers a stage, the remainder one more each on the stages just before the last; stage 0
holds the embedding, the last stage the LM head). The engine keeps up to ``p`` batches in
flight (V1's batch queue, ``max_concurrent_batches = p``): a request in an in-flight batch is
not scheduled again until that batch returns, so the running requests form up to ``p``
micro-batches that chase each other through the stages.

One Tidal step is one **pipeline round**: every request of the plan advances once. With the
plan's S sequences split into m = min(p, ⌈S/dp⌉) balanced micro-batches (m ≤ p: no stage is
ever busy when a micro-batch reaches it), a micro-batch of shape b returns after its p stage
times plus p − 1 activation sends, and the round's duration is that of its heaviest one:

    round(S) = T_tp(b_max) + (p − 1)·δ(tokens(b_max))

where ``T_tp`` is the TP-only step model of the whole model (its layer sum split over the
stages: Σ stage times = T_tp) and δ one stage-to-stage send. Limits: m = 1 (one request, or a
cold start) gives T_tp(whole batch) + (p − 1)·δ — p stage times and the bubble: no faster than
TP alone; m = p balanced micro-batches give the steady state, every request one token per
T_tp(S/p) + (p − 1)·δ. The heaviest micro-batch holds ⌈n/m⌉ decodes and ⌈c/m⌉ whole prefill
chunks (chunks are not split; their sums scaled by that share, rounded up).

Exactness: the micro-batch's decode context is the plan's times one float ratio, so the
round is the same IEEE expression on a scalar or an array of contexts: the default
vectorised :meth:`PerfModel.decode_run_ns` is bit-identical to stepping (no affine path).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tidal.core.errors import ConfigError
from tidal.hardware.engine_tables import nccl_us
from tidal.hardware.interp import Curve
from tidal.hardware.models import ModelSpec
from tidal.hardware.perf import PerfModel

SEND_LAT_S = 10e-6
"""Latency of one NCCL send/recv where no table prices it (the link model's fallback)."""
SEND_ETA = 0.7
"""Share of the peer link's bandwidth a send reaches in the fallback."""


def stage_layers(num_layers: int, pp: int) -> list[int]:
    """Layers of each stage, vLLM's ``get_pp_indices`` split: ⌊L/p⌋ each, the remainder one
    more each on the stages just before the last (the last one holds the LM head)."""
    if pp < 1 or pp > num_layers:
        raise ConfigError(
            "pipeline_parallel_size", f"{pp} stages for {num_layers} layers",
            f"set --pipeline-parallel-size from 1 to {num_layers}",
        )  # fmt: skip
    parts = [num_layers // pp] * pp
    for i in range(2, num_layers % pp + 2):
        parts[-i] += 1
    return parts


def check_pipeline(model: ModelSpec, pp: int) -> None:
    """Raise a ``ConfigError`` naming ``pipeline_parallel_size`` unless 1 ≤ pp ≤ layers."""
    stage_layers(model.num_layers, pp)


def binding_stage(
    model: ModelSpec, tp: int, pp: int, weights: float, per_tok: float, seq_state: float,
    free: float, block_size: int,
) -> tuple[float, float, float]:
    """``(weights, KV bytes per token, window/state reserve)`` per GPU of the stage that holds
    the fewest KV blocks, from the whole model's per-GPU figures at TP (``free``: the memory
    left per GPU before weights and that reserve). A stage holds its layers' share of the
    layer weights, KV and state, plus the embedding (stage 0) or the LM head (the last stage;
    a tied head too: vLLM builds it there), one vocab × hidden matrix each over ``tp``. vLLM
    gives every stage the smallest stage's block count (``get_kv_cache_configs``)."""
    L = model.num_layers
    emb = model.embedding_params * model.dtype_bytes / tp
    layer_w = weights - emb * (1 if model.tie_embeddings else 2)
    best: tuple[float, tuple[float, float, float]] | None = None
    for s, n in enumerate(stage_layers(L, pp)):
        w = layer_w * n / L + emb * ((s == 0) + (s == pp - 1))
        tok, state = per_tok * n / L, seq_state * n / L
        blocks = (free - w - state) / (tok * block_size) if tok > 0 else float("inf")
        if best is None or blocks < best[0]:
            best = (blocks, (w, tok, state))
    assert best is not None
    return best[1]


def send_bytes(model: ModelSpec, tokens: int, tp: int) -> float:
    """Bytes one GPU sends to the next stage for ``tokens`` tokens: the hidden states and the
    residual (vLLM's ``IntermediateTensors``), split over the TP ranks (``send_tensor_dict``
    with ``all_gather_group``; the receiving stage all-gathers them)."""
    return 2.0 * tokens * model.hidden_size * model.dtype_bytes / tp


class SendModel:
    """Seconds of one stage-to-stage send of a micro-batch's activations: a 2-GPU exchange of
    the rank's slice plus, with TP, the receiving stage's all-gather of the whole tensors,
    both from the engine's NCCL tables (``all_gather`` rows of 2 and ``tp`` GPUs), else a link
    model (10 µs + bytes / (0.7 · NVLink bandwidth))."""

    def __init__(self, model: ModelSpec, tp: int, peer_bw: float, system: str | None) -> None:
        self.model, self.tp, self.peer_bw = model, tp, peer_bw
        pair = nccl_us(system, "all_gather", 2) if system else None
        gather = nccl_us(system, "all_gather", min(tp, 8)) if system and tp > 1 else None
        self._pair = None if pair is None else Curve(pair[0], [v * 1e-6 for v in pair[1]])
        self._gather = None if gather is None else Curve(gather[0], [v * 1e-6 for v in gather[1]])
        self.source = "engine:nccl/all_gather" if self._pair is not None else "link-model"

    def _link(self, nbytes: float) -> float:
        return SEND_LAT_S + nbytes / (SEND_ETA * self.peer_bw)

    def seconds(self, tokens: int) -> float:
        """One send of ``tokens`` tokens' activations (0 for none)."""
        if tokens <= 0:
            return 0.0
        part = send_bytes(self.model, tokens, self.tp)
        t = self._pair.at(part) if self._pair is not None else self._link(part)
        if self.tp > 1:
            whole = part * self.tp
            t += self._gather.at(whole) if self._gather is not None else self._link(whole)
        return t


class PipelinePerfModel(PerfModel):
    """A TP step model run as ``pp`` pipeline stages: one step is one pipeline round (module
    docstring). ``base`` times the whole model at TP on one micro-batch; ``send(tokens)`` one
    stage-to-stage send; ``dp`` data-parallel ranks each form their own micro-batches."""

    name = "pipeline"

    def __init__(
        self, base: PerfModel, pp: int, send: Callable[[int], float], dp: int = 1,
        send_source: str = "",
    ) -> None:  # fmt: skip
        if pp < 2:
            raise ValueError("PipelinePerfModel needs pp ≥ 2 (pp 1 is the base model itself)")
        self.base, self.pp, self.send, self.dp = base, pp, send, dp
        self.send_source = send_source
        self._send_cache: dict[int, float] = {}

    def micro_batches(self, seqs: int) -> int:
        """m = min(p, ⌈S/dp⌉): micro-batches the round's S sequences form."""
        return max(1, min(self.pp, -(-seqs // self.dp)))

    def _sends(self, tokens: int) -> float:
        t = self._send_cache.get(tokens)
        if t is None:
            t = self._send_cache[tokens] = (self.pp - 1) * self.send(-(-tokens // self.dp))
        return t

    def step_seconds(
        self,
        num_decodes: int,
        decode_ctx: Any,
        prefill_tokens: int,
        prefill_attn: int,
        prefill_ctx: int,
        num_prefills: int,
        mx: Callable[[Any, Any], Any] = max,
    ) -> Any:
        seqs = num_decodes + num_prefills
        if num_decodes + prefill_tokens == 0:
            return 0.0
        m = self.micro_batches(seqs)
        if m == 1:
            t = self.base.step_seconds(num_decodes, decode_ctx, prefill_tokens, prefill_attn,
                                       prefill_ctx, num_prefills, mx)  # fmt: skip
            return t + self._sends(num_decodes + prefill_tokens)
        n = -(-num_decodes // m)
        ctx = decode_ctx * (n / num_decodes) if num_decodes else decode_ctx
        c = -(-num_prefills // m)
        if num_prefills:
            pt = -(-prefill_tokens * c // num_prefills)
            pa = -(-prefill_attn * c // num_prefills)
            pc = -(-prefill_ctx * c // num_prefills)
        else:
            pt = pa = pc = 0
        t = self.base.step_seconds(n, ctx, pt, pa, pc, c, mx)
        return t + self._sends(n + pt)

    def idle_penalty_ns(self, idle_ns: int) -> int:
        return self.base.idle_penalty_ns(idle_ns)

    def describe(self) -> dict[str, Any]:
        out = dict(self.base.describe())
        out["pipeline"] = {"pipeline_parallel_size": self.pp, "send": self.send_source}
        return out


def pipeline_model(
    base: PerfModel, model: ModelSpec, tp: int, pp: int, peer_bw: float,
    system: str | None, dp: int = 1,
) -> PerfModel:  # fmt: skip
    """``base`` itself for pp = 1, else its :class:`PipelinePerfModel` over ``pp`` stages."""
    if pp == 1:
        return base
    check_pipeline(model, pp)
    send = SendModel(model, tp, peer_bw, system)
    return PipelinePerfModel(base, pp, send.seconds, dp, send.source)


def unwrap_pipeline(perf: PerfModel) -> PerfModel:
    """The TP step model inside a pipeline wrapper (``perf`` itself otherwise)."""
    return perf.base if isinstance(perf, PipelinePerfModel) else perf
