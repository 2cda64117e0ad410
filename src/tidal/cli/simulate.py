"""``tidal simulate``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

from tidal.cli.app import (
    Opt,
    TidalError,
    _deep_merge,
    _fail,
    _run_and_write,
    _set,
    app,
    console,
    err_console,
    metrics_table,
)
from tidal.cli.flags import SIMULATE
from tidal.cli.plain import styled


@app.command()
@SIMULATE.options
def simulate(
    out: Annotated[
        Path | None, Opt(help="Output directory (summary.json, requests.parquet).")
    ] = None,
    config: Annotated[Path | None, Opt(help="YAML config; flags override its values.")] = None,
    flags: dict[str, Any] | None = None,
    plot: Annotated[bool, Opt("--plot/--no-plot", help="Cluster: write gpu_timeline.png.")] = True,
    unit_shapes: Annotated[
        str,
        Opt(help="Cluster: 'given' runs each --models entry as written; 'auto' first plans "
            "each model's unit shape (aggregated, 1p1d, 2p1d / 1p2d with per-pool TP, 2p2d) "
            "on its own slice of the workload: the fewest GPUs of one node meeting the SLO "
            "(--slo-ttft, --slo-tpot) for --unit-shapes-attainment of its requests; writes "
            "unit_shapes.json."),
    ] = "given",
    unit_shapes_attainment: Annotated[
        float, Opt(help="--unit-shapes auto: the share of requests that must meet the SLO.")
    ] = 0.99,
) -> None:
    """Simulate one serving instance, or a multi-model cluster (--cluster), on a trace or a
    synthetic workload."""
    from tidal.sim.config import load_config, load_yaml  # lazy: keeps tidal --help fast

    given = flags or {}
    try:
        data: dict[str, Any] = load_yaml(config) if config else {}
        argv = sys.argv[1:]
        data = _deep_merge(data, _cluster_flags(SIMULATE.config(given, argv), given, data))
        data.setdefault("workload", {})
        cfg = load_config(data, SIMULATE.key_names(argv))
        choices = None
        if unit_shapes != "given":
            cfg, choices = _plan_unit_shapes(cfg, unit_shapes, unit_shapes_attainment)
        result = _run_and_write(cfg, out)
        if choices is not None and out is not None:
            _write_unit_shapes(out, choices)
        if out is not None and "ebplus" in result.extras.get("tables", {}):
            from tidal.report.ebplus_plot import plot_ebplus  # lazy: keeps tidal --help fast

            plot_ebplus(
                result.extras["tables"]["ebplus"],
                Path(out) / "ebplus_mode.png",
                f"EB⁺: {cfg.model} on {cfg.gpu}",
                cfg.scheduler.eb.selector.sticky,
            )
    except TidalError as err:
        _fail(err)
        return
    if cfg.cluster is not None:
        _print_cluster(cfg, result, out, plot)
        return
    console.print(metrics_table(_title(cfg), {"this run": result.metrics}))
    if "pools" in result.metrics:  # a disaggregated deployment
        from tidal.sim.disagg_metrics import describe

        for line in describe(result.metrics):
            console.print(line, highlight=False)
    info = result.run_info
    console.print(
        f"simulated {result.metrics['num_requests']:,} requests in {info['simulate_s']:.2f} s "
        f"({info['simulated_requests_per_s']:,.0f} req/s, {info['num_events']:,} events)"
        + (f"; results in {out}" if out else "")
    )
    from tidal.cli.notes import run_notes  # lazy: keeps tidal --help fast

    for note in run_notes(cfg, result):
        head, _, tail = note.partition(":")  # plain text: user values are never markup
        style = "bold yellow" if head == "overloaded" else "bold"
        err_console.print(styled((head + ":", style), tail), highlight=False)


_CLUSTER_ONLY = [f.name for f in SIMULATE if f.key and f.key.startswith("cluster.")]


def _cluster_flags(
    flags: dict[str, Any], given: dict[str, Any], data: dict[str, Any]
) -> dict[str, Any]:
    """In a cluster run, --rate is the mix's total and --workload the mix's augmented requests;
    outside one, the cluster flags set nothing."""
    in_cluster = any(given.get(k) is not None for k in ("cluster", "models", "placement"))
    if not (in_cluster or "cluster" in data):
        stray = [SIMULATE[f].names[0] for f in _CLUSTER_ONLY if given.get(f) is not None]
        if stray:
            raise TidalError(
                f"{', '.join(stray)}: ignored in a single-instance run (they set up a "
                "multi-model cluster); add --cluster NODESxGPUS:GPU, or remove them"
            )
        flags.pop("cluster", None)
        return flags
    workload = flags.get("workload", {})
    mix = flags.setdefault("cluster", {}).setdefault("mix", {})
    for key in ("rate", "augmented"):
        if key in workload:
            mix[key] = workload.pop(key)
    if not mix:
        del flags["cluster"]["mix"]
    no_trace = given.get("trace") is None and not data.get("workload", {}).get("trace")
    if given.get("mix") == "servegen" and no_trace:
        _set(flags, "workload.trace", "servegen/servegen_aggregate_rate_10min.csv.gz")
    return flags


def _plan_unit_shapes(cfg: Any, mode: str, attainment: float) -> tuple[Any, list[Any]]:
    """``--unit-shapes auto``: each model's shape chosen (experiments/unit_shapes.py), printed."""
    if mode != "auto":
        raise TidalError(f"--unit-shapes {mode!r}: use 'given' (the entries as written) or "
                         "'auto' (plan each model's unit shape)")  # fmt: skip
    if not 0 < attainment <= 1:
        raise TidalError(f"--unit-shapes-attainment {attainment:g}: a share in (0, 1], e.g. 0.99")
    from tidal.experiments.unit_shapes import choose_unit_shapes  # lazy: keeps --help fast

    cfg, choices = choose_unit_shapes(cfg, attainment)
    for ch in choices:
        r = ch.chosen
        if r is None:
            how = "every shape skipped: kept" if ch.results else "no requests: kept"
        else:
            below = "" if r.meets else " (below target)"
            how = (f"{r.gpus} GPU{'s' if r.gpus != 1 else ''}, SLO attainment "
                   f"{(r.metrics['slo_attainment'] or 0):.1%}{below}")  # fmt: skip
        console.print(f"unit shape of {ch.name}: {ch.entry} ({how})")
    return cfg, choices


def _write_unit_shapes(out: Path, choices: list[Any]) -> None:
    import json

    path = Path(out) / "unit_shapes.json"
    path.write_text(json.dumps({ch.name: ch.summary() for ch in choices}, indent=2) + "\n")


def _print_cluster(cfg: Any, result: Any, out: Path | None, plot: bool) -> None:
    c = cfg.cluster
    per_model = result.extras["summary"]["per_model"]
    rows = {"all": result.metrics, **per_model}
    title = f"{c.placement} on {c.spec}: {', '.join(per_model)}"
    console.print(metrics_table(title, rows))
    m = result.metrics
    hit = m.get("prewarm_hit_rate")
    console.print(
        f"instance starts {m['instance_starts']}, cold starts {m['cold_starts']}, prewarm hit "
        f"rate {'—' if hit is None else f'{hit:.1%}'}, GPU-seconds {m['gpu_seconds']:,.0f}"
    )
    from tidal.sim.cluster_units import describe_units  # lazy: keeps tidal --help fast

    for line in describe_units(per_model):  # disaggregated units: pools and KV transfers
        console.print(line)
    if out is not None and plot:
        from tidal.report.cluster_plot import plot_gpu_timeline  # lazy: keeps tidal --help fast

        plot_gpu_timeline(result, out / "gpu_timeline.png")
    info = result.run_info
    console.print(
        f"simulated {m['num_requests']:,} requests in {info['simulate_s']:.2f} s "
        f"({info['num_events']:,} events)" + (f"; results in {out}" if out else "")
    )


def _title(cfg: Any) -> str:
    """The run table's title: model, the instance's GPUs (tp × pp × dp), and the policy."""
    policy = cfg.scheduler.batching
    if cfg.workload.augmented is not None:
        policy = cfg.augment.serving_policy
    if cfg.perf_model.startswith("profile:"):
        return f"{cfg.model}, measured {cfg.perf_model}, {policy}"
    if cfg.deployment is not None and cfg.deployment.disaggregated:
        return f"{cfg.model}, disaggregated prefill/decode, {policy}"
    gpus = cfg.tp * cfg.pipeline_parallel_size * cfg.data_parallel_size
    layout = [f"tp {cfg.tp}"] + [
        f"{name} {n}"
        for name, n in (("pp", cfg.pipeline_parallel_size), ("dp", cfg.data_parallel_size))
        if n > 1
    ]
    shape = f" ({' × '.join(layout)})" if len(layout) > 1 else ""
    return f"{cfg.model} on {gpus}× {cfg.gpu}{shape}, {policy}"

