"""The logical models a cluster serves (docs/research/warmserve.md §1.3).

The same catalog model may appear several times (the artifact serves two "virtual" Llama-2-7B
models with their own traffic); repeated ids are named ``id#k`` in order of appearance. Each
entry may give its tensor-parallel degree as ``id:tp``; otherwise the artifact's choice for the
Llama-2 family (7B→1, 13B→2, 70B→4), else the smallest power of two whose weight shard fits in
40% of a GPU.

A **disaggregated** entry, ``id:PpDd`` or ``id:tp:PpDd`` (``llama-2-7b:1p1d``), serves the model
as a unit of P prefill and D decode engines of ``tp`` GPUs each (docs/design/
disagg-cluster-composition.md §B): ``tp`` of the :class:`ServedModel` is then the unit's GPU
group, P·tp_p + D·tp_d — what placement, prewarming and the autoscaler count — while weights
and KV blocks are sharded by each engine's own TP: every GPU of the group holds one engine's
shard of the weights, so a prewarmed replica is the weights on the prefill *and* the decode
GPUs. Each pool may have its own TP (as ``--prefill-tp`` / ``--decode-tp`` of a single
deployment): ``id:TPp/TPd:PpDd`` (``llama-2-7b:1/2:2p1d``: two TP1 prefill engines and one TP2
decode engine on 4 GPUs). The group's first P·tp_p GPUs are the prefill engines', the rest the
decode engines'; a GPU then holds the shard of its own engine (:meth:`ServedModel.weight_split`).

Per-GPU sizes are counted in memory pages: weights take ``align_up(bytes / tp, page)``
(``align_up`` as the artifact's ``MEM_GRANULARITY``), a KV block of ``block_size`` tokens takes
``ceil(block_bytes_per_gpu / page)`` pages.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, replace

from tidal.core.errors import ConfigError
from tidal.hardware.gpus import GPUSpec
from tidal.hardware.models import ModelSpec, check_tp, get_model

ARTIFACT_TP = {"llama-2-7b": 1, "llama-2-13b": 2, "llama-2-70b": 4}

ARTIFACT_SERVICE_MS = {
    "llama-2-7b": (35.0, 15.0),
    "llama-2-13b": (70.0, 20.0),
    "llama-2-70b": (100.0, 30.0),
}
"""(prefill ms, decode ms per token) the artifact uses to turn a trace into concurrency
(docs/research/warmserve.md §2.1). Other models use the row of the nearest size (see
:func:`service_ms`)."""


def service_ms(spec: ModelSpec) -> tuple[float, float]:
    if spec.name in ARTIFACT_SERVICE_MS:
        return ARTIFACT_SERVICE_MS[spec.name]
    b = spec.num_params / 1e9
    key = "llama-2-7b" if b < 10 else "llama-2-13b" if b < 30 else "llama-2-70b"
    return ARTIFACT_SERVICE_MS[key]


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class ServedModel:
    index: int
    name: str
    """Unique name in results (``llama-2-7b#0``)."""
    spec: ModelSpec
    tp: int
    weight_pages: int
    """Pages per GPU for one shard of the weights."""
    block_pages: int
    """Pages per GPU for one KV block."""
    block_size: int
    page_bytes: int
    prefill_engines: int = 0
    decode_engines: int = 0
    """A disaggregated unit's engines (module docstring); 0, 0: one aggregated engine."""
    prefill_tp: int = 0
    decode_tp: int = 0
    """Per-pool TP of a unit whose pools differ (``id:TPp/TPd:PpDd``); 0, 0: every engine of
    the unit has ``tp / (P + D)`` GPUs. With per-pool TP, ``weight_pages`` is the larger of the
    two shards (what placement asks of every GPU of the group) and ``block_pages`` the decode
    engines' (:meth:`weight_split` and :attr:`prefill_block_pages` give each pool's)."""
    split: bool = False
    """A unit placed as two GPU groups, its prefill pool's P·tp_p GPUs and its decode pool's
    D·tp_d GPUs, each a power of two inside one node, the two possibly on different nodes
    (``cluster.unit_pools``, :mod:`tidal.cluster.placement_units`); False: one group."""
    apart: bool = False
    """A split unit whose two groups must sit on different nodes (``unit_pools: apart``)."""

    @property
    def groups(self) -> tuple[int, ...]:
        """GPU counts of the instance's groups, in order: ``(tp,)``, or a split unit's
        ``(P·tp_p, D·tp_d)`` (prefill first; ``tp`` is their sum)."""
        if not self.split:
            return (self.tp,)
        return (self.prefill_engines * self.prefill_engine_tp, self.decode_engines * self.engine_tp)

    @property
    def disaggregated(self) -> bool:
        return self.decode_engines > 0

    @property
    def slots(self) -> int:
        """Request slots of one instance in units of the router cap B: a unit's decode
        engines (1: an aggregated engine)."""
        return self.decode_engines or 1

    @property
    def engine_tp(self) -> int:
        """GPUs of one (decode) engine (``tp`` for an aggregated model)."""
        return self.decode_tp or self.tp // (self.prefill_engines + self.decode_engines or 1)

    @property
    def prefill_engine_tp(self) -> int:
        """GPUs of one prefill engine of a unit (``engine_tp`` unless the pools differ)."""
        return self.prefill_tp or self.engine_tp

    @property
    def min_tp(self) -> int:
        """The smaller engine TP of the instance (its GPUs' largest weight shard)."""
        return min(self.engine_tp, self.prefill_engine_tp)

    @property
    def max_tp(self) -> int:
        """The larger engine TP of the instance (an NCCL group is built when it is > 1)."""
        return max(self.engine_tp, self.prefill_engine_tp)

    @property
    def mixed_tp(self) -> bool:
        """A unit whose prefill and decode engines have different TP."""
        return self.prefill_tp != self.decode_tp

    @property
    def shard_bytes(self) -> int:
        return self.weight_pages * self.page_bytes

    def shard_pages(self, tp: int) -> int:
        """Pages per GPU of one ``tp``-way shard of the weights."""
        return cdiv(cdiv(self.spec.weight_bytes, tp), self.page_bytes)

    @property
    def prefill_block_pages(self) -> int:
        """Pages per GPU of one KV block of a prefill engine."""
        if not self.mixed_tp:
            return self.block_pages
        blk = self.spec.kv_bytes_per_token_per_gpu(self.prefill_tp) * self.block_size
        return cdiv(math.ceil(blk), self.page_bytes)

    def weight_split(self, gpus: tuple[int, ...]) -> list[tuple[tuple[int, ...], int]]:
        """``[(GPUs, weight pages on each)]`` over the instance's group ``gpus``: one part,
        or, for a unit with per-pool TP, its prefill GPUs (the first P·tp_p) and its decode
        GPUs."""
        if not self.mixed_tp:
            return [(gpus, self.weight_pages)]
        k = self.prefill_engines * self.prefill_tp
        return [(gpus[:k], self.shard_pages(self.prefill_tp)),
                (gpus[k:], self.shard_pages(self.decode_tp))]  # fmt: skip

    def shard_bytes_on(self, i: int) -> int:
        """Weight bytes loaded onto the ``i``-th GPU of the instance's group."""
        if not self.mixed_tp:
            return self.shard_bytes
        tp = self.prefill_tp if i < self.prefill_engines * self.prefill_tp else self.decode_tp
        return self.shard_pages(tp) * self.page_bytes

    @property
    def kv_block_bytes(self) -> float:
        """Bytes of one KV block on one GPU (the exact, unrounded value)."""
        return self.spec.kv_bytes_per_token_per_gpu(self.engine_tp) * self.block_size


def _default_tp(spec: ModelSpec, gpu: GPUSpec, gpus_per_node: int) -> int:
    if spec.name in ARTIFACT_TP:
        return ARTIFACT_TP[spec.name]
    tp = 1
    while spec.weight_bytes / tp > 0.4 * gpu.mem_bytes and tp < gpus_per_node:
        tp *= 2
    return tp


MODELS_FIELD = "cluster.models (--models)"
"""How errors name the key (and the flag that sets it)."""

ENTRY_SYNTAX = (
    "accepted: id, id:tp, id:PpDd, id:tp:PpDd or id:TPp/TPd:PpDd (per-pool TP of a unit), "
    "with tp, P and D whole numbers ≥ 1, e.g. llama-2-7b, llama-2-70b:4, llama-2-7b:1p1d, "
    "llama-2-13b:2:1p3d, llama-2-13b:1/2:2p1d"
)


@dataclass(frozen=True)
class Entry:
    """One parsed ``--models`` entry: ``id[:tp][:PpDd]``."""

    id: str
    tp: int | None
    """The entry's tensor-parallel degree, a unit's prefill pool's with ``TPp/TPd`` (None:
    the default of :func:`_default_tp`)."""
    prefill: int = 0
    decode: int = 0
    """A disaggregated unit's engines (0, 0: aggregated)."""
    tp_decode: int | None = None
    """A unit's decode-pool degree where it differs (``id:TPp/TPd:PpDd``; None: ``tp``)."""


_SHAPE = re.compile(r"(\d+)p(\d+)d")


def parse_entry(entry: str) -> Entry:
    """``entry`` parsed, or one :class:`ConfigError` naming ``--models``, the entry, what is
    wrong and the accepted syntax (:data:`ENTRY_SYNTAX`)."""

    def bad(why: str) -> ConfigError:
        return ConfigError(MODELS_FIELD, f"bad entry {entry!r}: {why}", ENTRY_SYNTAX)

    mid, *parts = [x.strip() for x in entry.split(":")]
    if not mid:
        raise bad("no model id before the first ':'")
    if len(parts) > 2:
        raise bad(f"{len(parts)} ':'-separated parts after the id, at most 2 (tp, then PpDd)")
    shape = (0, 0)
    if len(parts) == 1 and "/" in parts[0]:
        raise bad(f"{parts[0]!r}: a per-pool TP (TPp/TPd) needs a unit shape PpDd after it")
    if parts and not parts[-1].isdecimal():
        m = _SHAPE.fullmatch(parts[-1].lower())
        if m is None:
            what = "the last part" if len(parts) > 1 else "it"
            raise bad(
                f"{parts[-1]!r} is neither a tensor-parallel degree nor a unit shape PpDd "
                f"({what} must be a whole number, or P prefill and D decode engines as 1p1d)"
            )
        shape = (int(m[1]), int(m[2]))
        if min(shape) < 1:
            raise bad("a disaggregated unit needs ≥ 1 prefill and ≥ 1 decode engine")
        parts.pop()
    tps = parts[0].split("/") if parts else []
    if len(tps) > 2 or not all(t.strip().isdecimal() for t in tps):
        last = " (the unit shape comes last)" if _SHAPE.fullmatch(parts[0].lower()) else ""
        raise bad(f"{parts[0]!r} is not a tensor-parallel degree (a whole number ≥ 1, or "
                  f"TPp/TPd in a unit){last}")
    degrees = [int(t) for t in tps]
    if any(t < 1 for t in degrees):
        raise bad("the tensor-parallel degree must be ≥ 1")
    tp = degrees[0] if degrees else None
    tp_d = degrees[1] if len(degrees) == 2 else None
    return Entry(mid, tp, *shape, tp_decode=tp_d)


def _spec(entry: Entry, raw: str) -> ModelSpec:
    """The entry's model; an unknown id names ``--models`` and the entry."""
    try:
        return get_model(entry.id)
    except ConfigError as err:
        raise ConfigError(MODELS_FIELD, f"entry {raw!r}: {err}") from None


UNIT_POOLS = ("together", "auto", "apart")
"""``cluster.unit_pools``: a unit is one group (``together``), two groups when it is not one
power-of-two group of a node (``auto``), or always two groups on different nodes (``apart``)."""


def _is_group(n: int, gpus_per_node: int) -> bool:
    """Whether ``n`` GPUs form one placement group: a power of two ≤ a node."""
    return n <= gpus_per_node and not n & (n - 1)


def _layout(
    entry: str, shape: tuple[int, int, int, int], gpus_per_node: int, pools: str
) -> tuple[bool, bool]:
    """(split, apart) of a unit ``shape`` = (P, tp_p, D, tp_d) under ``pools``
    (:data:`UNIT_POOLS`); raises a ``ConfigError`` naming the entry when it has no layout."""
    p, tp_p, d, tp_d = shape
    if not d:  # an aggregated instance: one TP group
        if not _is_group(tp_d, gpus_per_node):
            raise ConfigError(
                MODELS_FIELD,
                f"{entry!r}: tp {tp_d} must be a power of two ≤ {gpus_per_node} (GPUs per node)",
                "TP groups (and a disaggregated unit) stay inside one node",
            )
        return False, False
    group = p * tp_p + d * tp_d
    if pools == "together" or (pools == "auto" and _is_group(group, gpus_per_node)):
        if _is_group(group, gpus_per_node):
            return False, False
        tps = f"{tp_p}/{tp_d}" if tp_p != tp_d else f"{tp_d}"
        raise ConfigError(
            MODELS_FIELD,
            f"{entry!r}: its {p} + {d} engines × tp {tps} = {group} GPUs must be a power of two "
            f"≤ {gpus_per_node} (GPUs per node) with cluster.unit_pools: together",
            "set cluster.unit_pools: auto to place the prefill and decode pools as two groups "
            "(possibly on different nodes), or change the unit",
        )
    for what, n in (("prefill", p * tp_p), ("decode", d * tp_d)):
        if not _is_group(n, gpus_per_node):
            raise ConfigError(
                MODELS_FIELD,
                f"{entry!r}: its {what} pool's {n} GPUs must be a power of two ≤ "
                f"{gpus_per_node} (GPUs per node): each pool of a unit is one group of a node",
                "change the pool's engines or TP",
            )
    return True, pools == "apart"


def served_models(
    entries: list[str],
    gpu: GPUSpec,
    gpus_per_node: int,
    page_bytes: int,
    block_size: int,
    pools: str = "together",
) -> list[ServedModel]:
    """The served models of ``entries``; ``pools``: how a unit's pools are grouped
    (:data:`UNIT_POOLS`; ``cluster.unit_pools``)."""
    if not entries:
        raise ConfigError(MODELS_FIELD, "no models given", "e.g. llama-2-7b,llama-2-13b")
    parsed = [parse_entry(e) for e in entries]
    counts = Counter(e.id for e in parsed)
    seen: Counter[str] = Counter()
    out = []
    for i, (entry, ent) in enumerate(zip(entries, parsed, strict=True)):
        mid, p, d = ent.id, ent.prefill, ent.decode
        spec = _spec(ent, entry)
        tp_p = ent.tp if ent.tp is not None else _default_tp(spec, gpu, gpus_per_node)
        tp_d = ent.tp_decode if ent.tp_decode is not None else tp_p
        layout = _layout(entry, (p, tp_p, d, tp_d), gpus_per_node, pools)
        check_tp(spec, tp_p, MODELS_FIELD)
        check_tp(spec, tp_d, MODELS_FIELD)
        name = f"{mid}#{seen[mid]}" if counts[mid] > 1 else mid
        seen[mid] += 1
        out.append(_model(i, name, spec, (p, tp_p, d, tp_d), layout, page_bytes, block_size))
    return out


def _model(
    i: int,
    name: str,
    spec: ModelSpec,
    shape: tuple[int, int, int, int],
    layout: tuple[bool, bool],
    page_bytes: int,
    block_size: int,
) -> ServedModel:
    """The served model of a checked entry: ``shape`` = (P, tp_p, D, tp_d) (D = 0:
    aggregated at tp_d), ``layout`` = (split, apart)."""
    p, tp_p, d, tp_d = shape
    group = tp_p * p + tp_d * d if d else tp_d
    w = cdiv(spec.weight_bytes, min(tp_p, tp_d))
    blk = spec.kv_bytes_per_token_per_gpu(tp_d) * block_size
    tps = (tp_p, tp_d) if tp_p != tp_d else (0, 0)
    return ServedModel(
        i, name, spec, group, cdiv(w, page_bytes), cdiv(math.ceil(blk), page_bytes),
        block_size, page_bytes, p, d, *tps, *layout,
    )  # fmt: skip


def with_tp(model: ServedModel, tp: int) -> ServedModel:
    """The same logical model sharded over ``tp`` GPUs (MuxServe meshes choose the degree;
    aggregated models only)."""
    assert not model.disaggregated, "MuxServe meshes do not hold disaggregated units"
    spec = model.spec
    blk = spec.kv_bytes_per_token_per_gpu(tp) * model.block_size
    return replace(
        model,
        tp=tp,
        weight_pages=cdiv(cdiv(spec.weight_bytes, tp), model.page_bytes),
        block_pages=cdiv(math.ceil(blk), model.page_bytes),
    )
