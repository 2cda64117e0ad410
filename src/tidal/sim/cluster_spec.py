"""Speculative decoding in a cluster run (docs/design/disagg-cluster-composition.md §C).

Each served model speculates by its own config (``cluster.speculative`` by model id or name in
results, or a mapping entry's ``speculative_config``), else by the run's ``speculative``
(``--speculative-config``, every model). Its aggregated engines and its units' decode engines
speculate; a unit's prefill engines never do (their leg samples one token, as in a single
disaggregated run, ``sim/deployment.py``). An engine's step model is wrapped as a single
instance's is (:func:`tidal.sim.speculation.speculation_for`: verification of k + 1 rows plus
drafting, on the engine's own TP), and its acceptance draws use the run's speculation key
(:func:`~tidal.sim.speculation.speculation_key`): a request's accepted lengths depend on the
seed and its id alone, never on the engine or instance that serves it.

The controller's load estimates from the workload (the dedicated placement's demand,
WarmServe's priors) count speculation through each model's decode capacity
(:func:`spec_capacities`, :mod:`tidal.cluster.spec_capacity`); placement and routing see the
target's own step model otherwise.
"""

from __future__ import annotations

from tidal.cluster.models import ServedModel, served_models, service_ms
from tidal.cluster.spec_capacity import (
    DecodeCapacity,
    decode_capacity,
    engine_perf,
    speculative_service,
)
from tidal.cluster.topology import parse_cluster
from tidal.engine.acceptance import AcceptanceModel
from tidal.engine.spec_config import SpeculativeConfig
from tidal.hardware.gpus import GPUSpec
from tidal.hardware.perf import PerfModel
from tidal.sim.config import SimulationConfig
from tidal.sim.speculation import speculation_for, speculation_key
from tidal.workload.base import RequestSet


class ClusterSpeculation:
    """The speculative step models and acceptance draws of a cluster run's engines."""

    def __init__(self, cfg: SimulationConfig, gpu: GPUSpec) -> None:
        assert cfg.cluster is not None
        self.cluster = cfg.cluster
        self.default = cfg.speculative
        self.gpu = gpu
        self.key = speculation_key(cfg.seed)
        self._wrapped: dict[tuple[int, int, int], tuple[PerfModel, PerfModel]] = {}
        """(id(perf), model, tp) → (perf, its wrapped step model): perf kept alive so that
        its id stays unique."""
        self._accept: dict[int, AcceptanceModel] = {}
        """id(wrapped step model) → its acceptance draws."""

    def config(self, model: ServedModel) -> SpeculativeConfig | None:
        """``model``'s speculative config: by name in results, by id, else the run's."""
        own = self.cluster.speculative
        return own.get(model.name) or own.get(model.name.split("#")[0]) or self.default

    def wrap(self, model: ServedModel, perf: PerfModel, tp: int) -> PerfModel:
        """The step model of a speculating engine of ``model`` on ``tp`` GPUs (``perf`` when
        the model does not speculate); the same object for the same inputs."""
        spec = self.config(model)
        if spec is None:
            return perf
        k = (id(perf), model.index, tp)
        hit = self._wrapped.get(k)
        if hit is None:
            target = (model.spec, self.gpu, tp)
            c = self.cluster
            wrapped, accept = speculation_for(spec, perf, self.key, target, c.perf_model,
                                              c.perf_host)  # fmt: skip
            hit = self._wrapped[k] = (perf, wrapped)
            self._accept[id(wrapped)] = accept
        return hit[1]

    def acceptance(self, perf: PerfModel) -> AcceptanceModel | None:
        """The acceptance draws of an engine whose step model is ``perf`` (None: it does
        not speculate)."""
        return self._accept.get(id(perf))


def spec_capacities(
    cfg: SimulationConfig, stats: list[dict[str, float]], annotate: bool = False
) -> list[DecodeCapacity | None]:
    """Per model of the cluster (index order): its engines' decode capacity with speculation
    (:mod:`tidal.cluster.spec_capacity`) at B = ``cluster.batch`` requests of the model's mean
    context (mean prompt + mean output / 2, from ``stats``); None for a model that does not
    speculate. The step models are the engines' own (decode engines' TP, the cluster's
    ``perf_model``), built afresh: no acceptance draws are taken. ``annotate``: also set
    ``decode_time_factor`` in a speculating model's ``stats`` (MuxServe's estimate reads it)."""
    c = cfg.cluster
    assert c is not None
    topo = parse_cluster(c.spec)
    models = served_models(
        c.models, topo.gpu, topo.gpus_per_node, c.page_mib * 2**20, c.block_size, c.unit_pools
    )
    chooser = ClusterSpeculation(cfg, topo.gpu)
    out: list[DecodeCapacity | None] = []
    for m in models:
        spec = chooser.config(m)
        if spec is None:
            out.append(None)
            continue
        tp = m.engine_tp
        plain = engine_perf(c, m.spec, topo.gpu, tp)
        wrapped, _ = speculation_for(
            spec, plain, chooser.key, (m.spec, topo.gpu, tp), c.perf_model, c.perf_host
        )
        s = stats[m.index]
        ctx = max(1, round(s.get("mean_prompt", 0.0) + s.get("mean_output", 0.0) / 2))
        cap = decode_capacity(plain, wrapped, spec.expected_tokens(), c.batch, ctx)
        out.append(cap)
        if annotate:
            s["decode_time_factor"] = cap.factor
    return out


def service_times(
    cfg: SimulationConfig, caps: list[DecodeCapacity | None]
) -> list[tuple[float, float]]:
    """The artifact's (prefill ms, decode ms/token) per model, a speculating model's decode
    term × its capacity factor (:func:`~tidal.cluster.spec_capacity.speculative_service`)."""
    c = cfg.cluster
    assert c is not None
    topo = parse_cluster(c.spec)
    models = served_models(
        c.models, topo.gpu, topo.gpus_per_node, c.page_mib * 2**20, c.block_size, c.unit_pools
    )
    return [speculative_service(service_ms(m.spec), caps[m.index]) for m in models]


def mean_lengths(rs: RequestSet, num_models: int) -> list[dict[str, float]]:
    """Per model: ``mean_prompt`` and ``mean_output`` of its requests (0 without any)."""
    model = rs.extra["model"]
    out = []
    for m in range(num_models):
        sel = model == m
        n = int(sel.sum())
        out.append({
            "mean_prompt": float(rs.prompt_len[sel].mean()) if n else 0.0,
            "mean_output": float(rs.output_len[sel].mean()) if n else 0.0,
        })  # fmt: skip
    return out
