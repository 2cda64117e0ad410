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

The controller and the placement policies see the target's own step model (capacity
estimates, WarmServe's scores do not count speculation).
"""

from __future__ import annotations

from tidal.cluster.models import ServedModel
from tidal.engine.acceptance import AcceptanceModel
from tidal.engine.spec_config import SpeculativeConfig
from tidal.hardware.gpus import GPUSpec
from tidal.hardware.perf import PerfModel
from tidal.sim.config import SimulationConfig
from tidal.sim.speculation import speculation_for, speculation_key


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
