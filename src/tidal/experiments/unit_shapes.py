"""Unit shapes for one model of a cluster (docs/design/disagg-cluster-composition.md §E): the
model's own slice of the cluster's workload — exactly the requests the cluster's mix gives it —
replayed under each shape of the model's entry: aggregated (``id:tp``), or disaggregated units
``id:tp:PpDd`` / ``id:TPp/TPd:PpDd``. A shape runs as a dedicated-placement cluster of one node
(the placement fills the node with as many instances of the shape as fit, in aligned groups), so
the shapes differ in nothing but the entry.

The question is the capacity planner's: on how few GPUs does each shape meet the SLO? Each shape
is run on nodes of 1, 2, 4, … up to ``max_gpus`` GPUs (from its own group size up) until its run
completes every request with SLO attainment ≥ ``attainment`` (``slo.ttft_s`` / ``slo.tpot_s``
per request: the run's ``slo_attainment``). The choice is the shape meeting it on the fewest
GPUs, then the higher attainment, the lower TTFT p99, the lower TPOT p99; when no shape meets
it, the highest attainment on ``max_gpus``. A shape that cannot be placed on ``max_gpus`` (its
group is not a power of two ≤ ``max_gpus``, a TP the model refuses) is reported as skipped,
never simulated. With ``speculative`` options (vLLM's ``--speculative-config`` dicts, or None:
off), every shape is searched under each (the issue's "each with and without speculation").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tidal.cluster.models import ServedModel, served_models
from tidal.cluster.topology import parse_cluster
from tidal.core.errors import ConfigError
from tidal.sim.cluster_run import cluster_workload
from tidal.sim.config import SimulationConfig, load_config
from tidal.sim.run import run_simulation
from tidal.workload.base import RequestSet


def default_shapes(tp: int) -> list[str]:
    """Aggregated, 1p1d and 2p2d at the model's TP ``tp``, and the 3-engine units that fit a
    power-of-two group: 2p1d with TP-``tp`` prefill and TP-2·``tp`` decode engines, 1p2d with
    the reverse (4·``tp`` GPUs each)."""
    return ["agg", "1p1d", f"{tp}/{2 * tp}:2p1d", f"{2 * tp}/{tp}:1p2d", "2p2d"]
KEYS = ("num_requests", "num_completed", "slo_attainment", "gpu_seconds", "ttft_p50_s",
        "ttft_p99_s", "tpot_p50_s", "tpot_p99_s", "kv_transfer_bytes",
        "spec_decode_mean_acceptance_length")  # fmt: skip


KEEP = "as configured"
"""A speculation option: the model's own config (``cluster.speculative``, else the run's)."""


@dataclass(frozen=True)
class ShapeResult:
    shape: str
    entry: str
    """The ``cluster.models`` entry the shape is."""
    gpus: int
    """The fewest GPUs on which the shape met the SLO (else the most tried; 0: skipped)."""
    metrics: dict[str, Any]
    """That run's ``KEYS`` (empty when skipped)."""
    meets: bool
    skipped: str = ""
    """Why the shape was not simulated ("" when it was)."""
    speculative: str = "as configured"
    """The speculation option (:func:`spec_label`)."""


def model_slice(cfg: SimulationConfig, name: str) -> RequestSet:
    """The requests the cluster's workload gives model ``name`` (its name in results), as a
    one-model workload (``model`` column 0)."""
    model = _served(cfg, name)
    reqs = cluster_workload(cfg).requests
    rows = reqs.take(np.flatnonzero(reqs.extra["model"] == model.index))
    return RequestSet(rows.arrival_ns, rows.prompt_len, rows.output_len, rows.source,
                      {**rows.extra, "model": np.zeros(len(rows), np.int64)}, rows.payloads,
                      rows.content)  # fmt: skip


def _served(cfg: SimulationConfig, name: str) -> ServedModel:
    """The cluster's model named ``name`` in results."""
    c = cfg.cluster
    assert c is not None
    topo = parse_cluster(c.spec)
    models = served_models(
        c.models, topo.gpu, topo.gpus_per_node, c.page_mib << 20, c.block_size, c.unit_pools
    )
    for m in models:
        if m.name == name:
            return m
    names = [m.name for m in models]
    raise ConfigError("model", f"{name!r} is not a model of the cluster", f"one of {names}")


def shape_entry(model_id: str, tp: int, shape: str) -> str:
    """``agg`` → ``id:tp``; ``PpDd`` → ``id:tp:PpDd``; a shape with its own TP as given."""
    if shape == "agg":
        return f"{model_id}:{tp}"
    return f"{model_id}:{shape}" if ":" in shape else f"{model_id}:{tp}:{shape}"


def _shape_config(
    cfg: SimulationConfig, name: str, entry: str, gpus: int, spec: Any = KEEP
) -> dict[str, Any]:
    """The run of ``entry`` alone on one node of ``gpus`` GPUs (dedicated placement), with
    the speculative config ``spec`` (None: off; :data:`KEEP`: the model's own)."""
    data = cfg.model_dump(mode="json", exclude_unset=False)
    c = data["cluster"]
    gpu = c["spec"].split(":", 1)[1]
    own = c.get("speculative", {})
    if spec == KEEP:
        spec = own.get(name) or own.get(name.split("#")[0])
    else:
        data["speculative"] = None  # (the run's config would apply to the model)
    own_spec = {entry.split(":")[0]: spec} if spec else {}
    c.update(spec=f"1x{gpus}:{gpu}", models=[entry], placement="dedicated",
             placement_options={}, speculative=own_spec)  # fmt: skip
    return data


def _run(item: tuple[dict[str, Any], RequestSet]) -> dict[str, Any]:
    data, reqs = item
    res = run_simulation(load_config(data), reqs)
    return {k: res.metrics.get(k) for k in KEYS}


def spec_label(spec: Any) -> str:
    """``off``, ``as configured`` or ``<method> k=<k>``."""
    if spec is None or spec == KEEP:
        return "off" if spec is None else KEEP
    return f"{spec['method']} k={spec['num_speculative_tokens']}"


def compare_shapes(
    cfg: SimulationConfig,
    name: str,
    max_gpus: int,
    shapes: Sequence[str] | None = None,
    attainment: float = 0.99,
    speculative: Sequence[dict[str, Any] | None] | None = None,
) -> list[ShapeResult]:
    """Each shape of model ``name`` on its slice of ``cfg``'s workload (module docstring), in
    the order given (default :func:`default_shapes` at the model's TP), under each option of
    ``speculative`` (a ``--speculative-config`` dict, or None: off; default: as configured)."""
    c = cfg.cluster
    assert c is not None
    gpu = parse_cluster(c.spec).gpu
    model, reqs = _served(cfg, name), model_slice(cfg, name)
    shapes = list(shapes) if shapes is not None else default_shapes(model.min_tp)
    specs: list[Any] = [KEEP] if speculative is None else list(speculative)
    mid = name.split("#")[0]
    out = []
    for shape in shapes:
        entry = shape_entry(mid, model.min_tp, shape)
        try:
            (m,) = served_models([entry], gpu, max_gpus, c.page_mib << 20, c.block_size)
        except ConfigError as err:
            out.append(ShapeResult(shape, entry, 0, {}, False, str(err)))
            continue
        sizes = [g for g in (1 << k for k in range(max_gpus.bit_length())) if m.tp <= g]
        for spec in specs:
            out.append(_smallest(cfg, name, (shape, entry), sizes, reqs, spec, attainment))
    return out


def _smallest(
    cfg: SimulationConfig,
    name: str,
    shape: tuple[str, str],
    sizes: list[int],
    reqs: RequestSet,
    spec: Any,
    attainment: float,
) -> ShapeResult:
    """The shape's run on the fewest of ``sizes`` GPUs meeting the SLO (else the last)."""
    for g in sizes:
        metrics = _run((_shape_config(cfg, name, shape[1], g, spec), reqs))
        ok = metrics["num_completed"] == metrics["num_requests"]
        ok = ok and (metrics["slo_attainment"] or 0) >= attainment
        if ok or g == sizes[-1]:
            break
    return ShapeResult(*shape, g, metrics, ok, speculative=spec_label(spec))


def best_shape(results: Sequence[ShapeResult]) -> ShapeResult | None:
    """The choice of the module docstring (None: every shape skipped)."""
    ran = [r for r in results if not r.skipped]
    ok = [r for r in ran if r.meets]
    if ok:
        m = lambda r: r.metrics  # noqa: E731
        return min(ok, key=lambda r: (r.gpus, -m(r)["slo_attainment"], m(r)["ttft_p99_s"],
                                      m(r)["tpot_p99_s"]))  # fmt: skip
    if not ran:
        return None
    return max(ran, key=lambda r: (r.metrics["slo_attainment"] or 0, -r.metrics["ttft_p99_s"]))


@dataclass(frozen=True)
class ShapeChoice:
    """One model's planned shape (:func:`choose_unit_shapes`)."""

    name: str
    """The model's name in results."""
    given: str
    """Its ``cluster.models`` entry as written."""
    chosen: ShapeResult | None
    """The choice (None: every shape skipped; the entry is kept)."""
    results: list[ShapeResult]
    """Every shape tried, in order."""

    @property
    def entry(self) -> str:
        return self.given if self.chosen is None else self.chosen.entry

    def summary(self) -> dict[str, Any]:
        """For ``unit_shapes.json``: the entries, and each shape's GPUs, SLO and latencies."""
        def row(r: ShapeResult) -> dict[str, Any]:
            return {"shape": r.shape, "entry": r.entry, "gpus": r.gpus, "meets": r.meets,
                    "skipped": r.skipped, **r.metrics}  # fmt: skip

        return {"given": self.given, "entry": self.entry,
                "gpus": self.chosen.gpus if self.chosen else None,
                "meets": self.chosen.meets if self.chosen else False,
                "shapes": [row(r) for r in self.results]}  # fmt: skip


def choose_unit_shapes(
    cfg: SimulationConfig,
    attainment: float = 0.99,
    max_gpus: int | None = None,
    shapes: Sequence[str] | None = None,
) -> tuple[SimulationConfig, list[ShapeChoice]]:
    """``--unit-shapes auto``: every model of ``cfg``'s cluster gets the shape
    :func:`best_shape` picks on its own slice of the workload (:func:`compare_shapes`, on up
    to ``max_gpus`` GPUs — default one node — with its speculation as configured); returns
    the config with each ``cluster.models`` entry replaced by its choice (names in results,
    ``cluster.speculative`` keys and the workload unchanged) and the choices, in entry order."""
    c = cfg.cluster
    if c is None:
        raise ConfigError("cluster", "--unit-shapes auto plans the models of a cluster run",
                          "add --cluster NODESxGPUS:GPU and --models")  # fmt: skip
    topo = parse_cluster(c.spec)
    models = served_models(
        c.models, topo.gpu, topo.gpus_per_node, c.page_mib << 20, c.block_size, c.unit_pools
    )
    cap = max_gpus or topo.gpus_per_node
    choices = []
    for m, given in zip(models, c.models, strict=True):
        if len(model_slice(cfg, m.name)) == 0:  # no requests: nothing to plan by
            choices.append(ShapeChoice(m.name, given, None, []))
            continue
        res = compare_shapes(cfg, m.name, cap, shapes, attainment)
        choices.append(ShapeChoice(m.name, given, best_shape(res), res))
    data = cfg.model_dump(mode="json", exclude_unset=True)
    data.setdefault("cluster", {})["models"] = [ch.entry for ch in choices]
    return load_config(data), choices
