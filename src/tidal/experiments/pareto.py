"""``tidal plan --pareto``: deployment modes at a fixed GPU count, their throughput–latency
points under a load sweep, and the Pareto front (docs/design/disaggregation-speculation.md §4).

Options: each mode of the plan's ``modes`` (:data:`tidal.experiments.space.MODES`) expands to
option axes — ``mb``/``ebplus``: ``scheduler.batching`` × ``pareto.tp`` (G/TP replicas behind
the plan's router, :func:`~tidal.experiments.replicas.run_replicated`); ``disagg``:
``pareto.prefill_tp`` × ``pareto.decode_tp`` × ``pareto.pd_ratios`` (the P:D ratio scaled to
exactly G GPUs, one :func:`~tidal.sim.disagg.run_disaggregated`) — each without speculation
and with each of the plan's ``speculative`` configs. A combination that cannot use exactly G
GPUs is skipped (reported, never simulated).

Each option is simulated at every load of ``pareto.loads`` (closed-loop clients, or the
trace's ``rate_scale``). A point's axes are those AIConfigurator and InferenceX plot:
**tokens/s/GPU** = output tokens / makespan / all GPUs of all pools, and **tokens/s/user** =
1 / mean TPOT. The front is the set of non-dominated points (no other point is at least as
good on both axes and better on one) among the completed points that meet the SLO's TTFT
targets (``on_front_ttft``, the front printed and drawn, as AIConfigurator constrains TTFT;
``on_front``: of every completed point); the cost at the SLO is the cheapest point ($/Mtok of
output) whose run completes every request and meets every target of ``slo``.

Points are written as they finish under ``DIR/pareto_simulations/<key>.json`` (key: a hash of
the runner, GPU count and full config) and reused by a rerun, so an interrupted plan resumes;
``DIR/pareto.parquet`` is written atomically at the end.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tidal.core.errors import ConfigError
from tidal.core.io import write_json, write_parquet
from tidal.experiments.grid import apply_cell
from tidal.experiments.pareto_points import run_points
from tidal.experiments.plan_options import _with_slo, meets_slo
from tidal.experiments.results import _clean
from tidal.experiments.space import MODES, PlanSpec
from tidal.hardware.gpus import get_gpu
from tidal.sim.config import load_config

MODE_NAMES = {"mb": "MB", "ebplus": "EB+", "disagg": "disagg"}


@dataclass
class ParetoOption:
    """One deployment of exactly ``gpus`` GPUs."""

    mode: str
    label: str
    values: dict[str, Any]
    """Dotted config keys set over the plan's base."""
    gpus: int
    replicas: int = 1
    """Agg modes: replicas of ``tp`` GPUs; disagg: 1 (its pools are in ``values``)."""
    spec: str = "off"
    fields: dict[str, Any] = field(default_factory=dict)
    """Columns of ``pareto.parquet`` describing the option (tp, P:D, ...)."""


def front_mask(xs: list[float], ys: list[float]) -> list[bool]:
    """True where (x, y) is non-dominated (both maximised; NaN: never on it): sorted by x
    descending (ties: y descending), a point is on the front when its y beats the running max
    of the points before it — or equals it at the same x (duplicates of a front point stay on
    it)."""
    valid = [i for i in range(len(xs)) if not (math.isnan(xs[i]) or math.isnan(ys[i]))]
    order = sorted(valid, key=lambda i: (-xs[i], -ys[i]))  # NaN out first: it breaks sorting
    mask = [False] * len(xs)
    best_y, best_x = -math.inf, math.inf
    for i in order:
        x, y = xs[i], ys[i]
        if y > best_y or (y == best_y and x == best_x):
            mask[i] = True
            best_y, best_x = y, x
    return mask


def _spec_label(s: dict[str, Any] | str) -> str:
    d = json.loads(s) if isinstance(s, str) else s
    return f"{d['method']} k={d['num_speculative_tokens']}"


def _agg(mode: str, g: int, tps: list[int], pps: list[int]) -> Iterator[ParetoOption | str]:
    for tp in tps:
        for pp in pps:
            yield _agg_option(mode, g, tp, pp)


def _agg_option(mode: str, g: int, tp: int, pp: int) -> ParetoOption | str:
    """Replicas of tp × pp GPUs (pp 1: the option, label and key of before ``pareto.pp``)."""
    unit, shape = tp * pp, f"TP{tp}" + (f"×PP{pp}" if pp > 1 else "")
    if g % unit:
        what = f"TP {tp}" + (f" × PP {pp}" if pp > 1 else "")
        return f"{MODE_NAMES[mode]} {shape}: {g} GPUs are not a multiple of {what}"
    n = g // unit
    values: dict[str, Any] = {"scheduler.batching": mode, "tp": tp}
    fields: dict[str, Any] = {"tp": tp, "replicas": n}
    if pp > 1:
        values["pipeline_parallel_size"] = pp
        fields["pp"] = pp
    return ParetoOption(mode, f"{MODE_NAMES[mode]} {n}×{shape}", values, g, n, fields=fields)


def _disagg(spec: PlanSpec, g: int) -> Iterator[ParetoOption | str]:
    ps = spec.pareto
    for tp_p in ps.prefill_tp:
        for tp_d in ps.decode_tp:
            for ratio in ps.pd_ratios:
                p, d = (int(x) for x in ratio.split(":"))
                group = p * tp_p + d * tp_d
                if g % group:
                    yield f"disagg {ratio} TP{tp_p}/TP{tp_d}: {g} GPUs are not k×{group}"
                    continue
                k = g // group
                pools = {
                    "deployment.mode": "disagg",
                    "deployment.prefill.instances": k * p,
                    "deployment.prefill.tp": tp_p,
                    "deployment.decode.instances": k * d,
                    "deployment.decode.tp": tp_d,
                    "deployment.decode.scheduler": {"batching": "mb"},
                }
                label = f"disagg {k * p}P×TP{tp_p}:{k * d}D×TP{tp_d}"
                fields = {"pd": ratio, "prefill": k * p, "decode": k * d}
                fields |= {"tp_p": tp_p, "tp_d": tp_d}
                yield ParetoOption("disagg", label, pools, g, 1, fields=fields)


def pareto_options(spec: PlanSpec) -> tuple[list[ParetoOption], list[str]]:
    """The options (each × speculation off / each ``speculative``) and the skipped ones."""
    g = spec.pareto.gpus
    out: list[ParetoOption] = []
    skipped: list[str] = []
    for mode in spec.modes or list(MODES):
        opts = (_disagg(spec, g) if mode == "disagg"
                else _agg(mode, g, spec.pareto.tp, spec.pareto.pp))  # fmt: skip
        for o in opts:
            if isinstance(o, str):
                skipped.append(o)
                continue
            out.append(o)
            for s in spec.speculative:
                name = _spec_label(s)
                values = {**o.values, "speculative": s}
                out.append(
                    ParetoOption(o.mode, f"{o.label} + {name}", values, g, o.replicas, name,
                                 dict(o.fields))
                )  # fmt: skip
    if not out:
        raise ConfigError(
            "pareto.gpus", f"no mode option uses exactly {g} GPUs ({'; '.join(skipped)})",
            "give a GPU count that the TP (× PP) degrees and P:D ratios divide",
        )  # fmt: skip
    return out, skipped


def point_config(spec: PlanSpec, opt: ParetoOption, load: float) -> dict[str, Any]:
    """The option's full config at ``load`` (validated by the runner)."""
    key = spec.pareto.load_key
    value: float | int = int(load) if key == "concurrency" else float(load)
    base = _with_slo(spec.base, spec.targets())
    return apply_cell(base, {**opt.values, f"workload.{key}": value})


# ---------------------------------------------------------------------------- rows
def point_row(
    spec: PlanSpec, opt: ParetoOption, load: float, m: dict[str, Any]
) -> dict[str, Any]:
    """One row of ``pareto.parquet``."""
    gpu = str(spec.base.get("gpu", "h100"))
    price = spec.prices.get(gpu.partition("@")[0], get_gpu(gpu).price_per_hour)
    out_tps = float(m.get("output_token_throughput") or 0.0)
    tpot = m.get("tpot_mean_s")
    usd_mtok = price * opt.gpus / 3600.0 / out_tps * 1e6 if out_tps > 0 else math.nan
    return {
        "mode": opt.mode,
        "option": opt.label,
        "speculative": opt.spec,
        "tp": opt.fields.get("tp"),
        "pp": opt.fields.get("pp", 1 if opt.mode != "disagg" else None),
        "replicas": opt.fields.get("replicas"),
        "pd": opt.fields.get("pd"),
        "prefill_instances": opt.fields.get("prefill"),
        "decode_instances": opt.fields.get("decode"),
        "tp_p": opt.fields.get("tp_p"),
        "tp_d": opt.fields.get("tp_d"),
        "load_key": spec.pareto.load_key,
        "load": float(load),
        "gpus": opt.gpus,
        "tokens_per_s_per_gpu": out_tps / opt.gpus,
        "tokens_per_s_per_user": 1.0 / tpot if tpot else math.nan,
        **{k: m.get(k) for k in ("ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "tpot_p99_s")},
        "dollars_per_mtok": usd_mtok,
        "num_completed": m.get("num_completed"),
        "num_requests": m.get("num_requests"),
        "meets_slo": "error" not in m and meets_slo(m, spec.targets()),
        "error": m.get("error"),
    }


# ---------------------------------------------------------------------------- the plan
@dataclass
class ParetoOutcome:
    spec: PlanSpec
    rows: list[dict[str, Any]]
    """One per (option, load), in option order then load order; ``on_front`` (the front of
    every completed point) and ``on_front_ttft`` (of those meeting the SLO's TTFT targets —
    AIConfigurator's constrained front: a saturated prefill pool's point can have a fine
    TPOT and hours of queueing) set."""
    skipped: list[str]
    simulations_run: int
    simulations_reused: int
    wall_s: float = 0.0

    @property
    def front(self) -> list[dict[str, Any]]:
        """The TTFT-constrained front's points by tokens/s/user (most interactive last)."""
        return sorted(
            (r for r in self.rows if r["on_front_ttft"]), key=lambda r: r["tokens_per_s_per_user"]
        )

    @property
    def cheapest_at_slo(self) -> dict[str, Any] | None:
        """The point of least $/Mtok among those meeting the SLO (ties: the label)."""
        ok = [r for r in self.rows if r["meets_slo"] and math.isfinite(r["dollars_per_mtok"])]
        return min(ok, key=lambda r: (r["dollars_per_mtok"], r["option"], r["load"]), default=None)


def pareto(
    spec: PlanSpec,
    workers: int = 1,
    out_dir: str | Path | None = None,
    on_point: Callable[[dict[str, Any]], None] | None = None,
) -> ParetoOutcome:
    """Every option of the plan's modes at every load (module docstring) and the front."""
    import time


    if workers < 1:
        raise ConfigError("workers", f"must be >= 1, got {workers}")
    t0 = time.perf_counter()
    options, skipped = pareto_options(spec)
    pairs = [(o, x) for o in options for x in spec.pareto.loads]
    tasks = [(point_config(spec, o, x), o.replicas, spec.router) for o, x in pairs]
    for data in tasks[:: len(spec.pareto.loads)]:
        load_config(data[0])  # a config error names its field before any simulation

    def shown(i: int, m: dict[str, Any]) -> None:
        if on_point is not None:
            on_point(point_row(spec, *pairs[i], m))

    out = Path(out_dir) if out_dir is not None else None
    metrics, reused = run_points(tasks, workers, out, shown)
    rows = [
        {**point_row(spec, o, x, m), "metrics": m} for (o, x), m in zip(pairs, metrics, strict=True)
    ]
    if all(r["error"] for r in rows):
        raise ConfigError("pareto", f"every point failed; the first: {rows[0]['error']}")
    ttft = {k: v for k, v in spec.targets().items() if k.startswith("ttft_")}
    _mark_front(rows, "on_front", lambda r: True)
    _mark_front(rows, "on_front_ttft", lambda r: meets_slo(r["metrics"], ttft))
    for r in rows:
        del r["metrics"]
    n = len(tasks)
    return ParetoOutcome(spec, rows, skipped, n - reused, reused, time.perf_counter() - t0)


def _mark_front(
    rows: list[dict[str, Any]], col: str, keep: Callable[[dict[str, Any]], bool]
) -> None:
    """``row[col]``: the row is on the front of the completed rows that ``keep`` accepts."""
    ok = [r["error"] is None and r["num_completed"] == r["num_requests"] and keep(r) for r in rows]
    xs = [r["tokens_per_s_per_user"] if k else math.nan for r, k in zip(rows, ok, strict=True)]
    ys = [r["tokens_per_s_per_gpu"] if k else math.nan for r, k in zip(rows, ok, strict=True)]
    for r, on in zip(rows, front_mask(xs, ys), strict=True):
        r[col] = on


def write_pareto(outcome: ParetoOutcome, out_dir: str | Path) -> Path:
    """``DIR/pareto.parquet`` (every point) and ``DIR/pareto.json`` (the front, the cheapest
    point at the SLO, the skipped options, the sweep), each written atomically."""

    out = Path(out_dir)
    rows = outcome.rows
    cols = {k: [r[k] for r in rows] for k in rows[0]} if rows else {"option": []}
    write_parquet(out / "pareto.parquet", cols)
    spec = outcome.spec
    doc = {
        "gpus": spec.pareto.gpus,
        "gpu": spec.base.get("gpu", "h100"),
        "load_key": spec.pareto.load_key,
        "loads": spec.pareto.loads,
        "modes": spec.modes or list(MODES),
        "slo": spec.targets(),
        "front": outcome.front,
        "front_unconstrained": sorted(
            (r for r in outcome.rows if r["on_front"]), key=lambda r: r["tokens_per_s_per_user"]
        ),
        "cheapest_at_slo": outcome.cheapest_at_slo,
        "skipped": outcome.skipped,
        "simulations_run": outcome.simulations_run,
        "simulations_reused": outcome.simulations_reused,
        "wall_s": outcome.wall_s,
    }
    write_json(out / "pareto.json", _clean(doc))
    return out / "pareto.parquet"
