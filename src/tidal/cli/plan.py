"""``tidal plan``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

from rich.markup import escape
from rich.table import Table
from rich.text import Text

from tidal.cli.app import (
    Opt,
    TidalError,
    _deep_merge,
    _fail,
    app,
    console,
    err_console,
    on_interrupt,
)
from tidal.cli.flags import PLAN
from tidal.cli.flagspec import name_flag


def _pairs(text: str | None, field: str) -> dict[str, Any]:
    from tidal.experiments.grid import parse_value  # lazy: keeps tidal --help fast

    out: dict[str, Any] = {}
    for part in (text or "").split(","):
        if not part.strip():
            continue
        key, sep, val = part.partition("=")
        if not sep:
            raise TidalError(f"{field}: {part!r} is not KEY=VALUE")
        out[key.strip()] = parse_value(val)
    return out


def _precision_axes(data: dict[str, Any], names: dict[str, str]) -> None:
    """``--quantization fp8,modelopt_fp4`` (a comma list; the same for ``--kv-cache-dtype``)
    is a search axis: the list moves from ``base`` to ``search`` (its errors name the flag);
    one value stays in ``base`` (every option deployed in it)."""
    base = data.get("base") or {}
    for key in ("quantization", "kv_cache_dtype"):
        value = base.get(key)
        if isinstance(value, str) and "," in value:
            del base[key]
            data["search"][key] = [v.strip() for v in value.split(",") if v.strip()]
            if f"base.{key}" in names:
                names[f"search.{key}"] = names[f"base.{key}"]


def _pareto_precision(data: dict[str, Any]) -> None:
    """``--pareto`` compares deployment modes at one precision: a precision axis is refused
    (not dropped), and the planner's ``bf16`` / ``auto`` become config keys."""
    from tidal.experiments.plan_precision import resolve_precision

    for key in ("quantization", "kv_cache_dtype"):
        if key in data.get("search", {}):
            raise TidalError(
                f"{key}: --pareto compares deployment modes at one precision; give one value "
                "(or plan without --pareto to compare precisions by cost)"
            )
    resolve_precision(data["base"])


@app.command()
@PLAN.options
def plan(
    out: Annotated[Path, Opt(help="Output directory (plan.json, evaluations.parquet, runs/).")],
    flags: dict[str, Any] | None = None,
    search: Annotated[
        list[str] | None, Opt(help="More axes: KEY=V1,V2 over a dotted config key.")
    ] = None,
    slo_ttft_p99: Annotated[float | None, Opt(help="p99 TTFT target (s).")] = None,
    slo_tpot_p99: Annotated[float | None, Opt(help="p99 TPOT target (s).")] = None,
    slo: Annotated[
        str | None, Opt(help="Targets as ttft_p99=2,tpot_p99=0.1 (any ttft/tpot/e2e p50/90/99).")
    ] = None,
    prices: Annotated[str | None, Opt(help="USD per GPU-hour, e.g. h100=2.5,l40s=0.9.")] = None,
    config: Annotated[Path | None, Opt(help="Plan YAML (base, search, slo, ...).")] = None,
    exhaustive: Annotated[
        bool, Opt("--exhaustive", help="Simulate every option at every replica count.")
    ] = False,
    workers: Annotated[
        int,
        Opt(help="Processes simulating ahead of the search (the plan is the same for any N)."),
    ] = 1,
    pareto: Annotated[
        bool,
        Opt(
            "--pareto",
            help="Compare deployment modes at a fixed GPU count under a load sweep and print "
            "the Pareto front (pareto.parquet, pareto.png; the config's modes/pareto keys).",
        ),
    ] = False,
    modes: Annotated[
        str | None, Opt(help="With --pareto: modes to compare, e.g. mb,ebplus,disagg.")
    ] = None,
) -> None:
    """Find the cheapest deployment (GPU type and count, TP, policies) meeting the SLO.

    Precision is an axis too: --quantization bf16,fp8,modelopt_fp4 (bf16: the unquantized
    weights; auto: the checkpoint's) and --kv-cache-dtype auto,fp8 compare deployments of
    each precision by cost; a precision the GPU's measured tables lack is reported, not run."""
    # lazy: keeps tidal --help fast
    from rich.progress import Progress, SpinnerColumn, TimeElapsedColumn

    from tidal.core.outpath import check_out_dir
    from tidal.experiments.grid import parse_grid_arg
    from tidal.experiments.plan_cache import SIMS_DIR
    from tidal.experiments.planner import plan as run_plan
    from tidal.experiments.planner import write_plan
    from tidal.experiments.space import load_plan_spec
    from tidal.sim.config import load_yaml

    names: dict[str, str] = {}
    try:
        check_out_dir(out, "out", replaced=False)
        data: dict[str, Any] = load_yaml(config) if config else {}
        names = PLAN.key_names(sys.argv[1:])
        data = _deep_merge(data, PLAN.config(flags or {}, sys.argv[1:]))
        axes = data.setdefault("search", {})
        _precision_axes(data, names)
        for arg in search or []:
            key, values = parse_grid_arg(arg)
            axes[key] = values
        targets = {f"{k}_s": v for k, v in _pairs(slo, "slo").items()}
        if slo_ttft_p99 is not None:
            targets["ttft_p99_s"] = slo_ttft_p99
        if slo_tpot_p99 is not None:
            targets["tpot_p99_s"] = slo_tpot_p99
        if targets:
            data["slo"] = {**data.get("slo", {}), **targets}
        if prices:
            data["prices"] = {**data.get("prices", {}), **_pairs(prices, "prices")}
        data.setdefault("base", {}).setdefault("model", "llama-3.1-8b")
        if "trace" not in data["base"].get("workload", {}) and "num_requests" not in data[
            "base"
        ].get("workload", {}):
            raise TidalError("trace: give --trace PATH (or a base workload in --config)")
        if modes:
            data["modes"] = [m.strip() for m in modes.split(",") if m.strip()]
        if pareto:
            _pareto_precision(data)
        spec = load_plan_spec(data, names)
        if pareto:
            from tidal.cli.plan_pareto import run_pareto

            run_pareto(spec, out, workers)
            return

        bar = Progress(
            "[progress.description]{task.description}",
            SpinnerColumn(),
            "{task.completed} simulations",
            TimeElapsedColumn(),
            console=err_console,
            transient=True,
            disable=not err_console.is_terminal,
        )
        task = bar.add_task("planning")

        def show(ev: Any) -> None:
            verdict = (
                "meets"
                if ev.passed
                else ("misses (stopped early)" if ev.stopped_early else "misses")
            )
            bar.console.print(
                f"  {ev.capacity:>3}× {ev.option.label}: {verdict} the SLO", highlight=False
            )
            bar.update(task, advance=1, description=escape(f"planning: {ev.option.label}"))

        def kept() -> str:
            n = len(list((out / SIMS_DIR).glob("*.json")))
            return (
                f"{n} simulations kept in {out / SIMS_DIR}; run the same command again to "
                "resume (finished simulations are reused)"
            )

        with on_interrupt(kept), bar:
            outcome = run_plan(
                spec, exhaustive=exhaustive, on_evaluation=show, workers=workers, out_dir=out
            )
            write_plan(outcome, out)
    except TidalError as err:
        _fail(name_flag(err, names, "base."))
        return
    t = plan_table(outcome)
    console.print(t)
    if not outcome.candidates:
        console.print("no deployment in the search space meets the SLO", style="bold")
    _print_skipped(outcome)
    reused = (
        f", {outcome.simulations_reused} reused from an earlier run"
        if outcome.simulations_reused
        else ""
    )
    console.print(
        f"{outcome.simulations_run} simulations (the exhaustive grid: "
        f"{outcome.exhaustive_simulations}{reused}) in {outcome.wall_s:.1f} s; "
        f"plan in {out / 'plan.json'}"
    )


def _print_skipped(outcome: Any) -> None:
    """One line per distinct reason an option was not simulated for its precision (the
    GPU's tables lack it), with how many options it covers (plan.json: each option's)."""
    reasons: dict[str, int] = {}
    for o in outcome.outcomes:
        if o.status == "no-tables":
            reasons[o.detail] = reasons.get(o.detail, 0) + 1
    for detail, n in reasons.items():
        console.print(f"skipped {n} option{'s' if n > 1 else ''}: {escape(detail)}", style="dim")


PRECISION_AXES = ("quantization", "kv_cache_dtype", "gemm_quant", "moe_quant")


def plan_table(outcome: Any) -> Table:
    """The returned deployments, cheapest first. A deployment that other options served
    identically (a knob that made no difference) lists those knobs' values under its label;
    with prefix caching on, a column gives its hit rate."""
    spec = outcome.spec
    t = Table(title=f"cheapest deployments meeting {spec.targets()} ({spec.objective})")
    cached = any(
        c["metrics"].get("prefix_caching") and c["metrics"].get("prefix_cache_queries")
        for c in outcome.candidates
    )
    precisions = {c.get("precision") or "bf16" for c in outcome.candidates}
    shown = precisions != {"bf16"} or any(k in spec.search for k in PRECISION_AXES)
    cols = ["#", "deployment", *(["precision"] if shown else []), "GPUs", "GPU-hours", "$"]
    cols += ["TTFT p99 s", "TPOT p99 ms"]
    for col in [*cols, *(["prefix hit"] if cached else [])]:
        t.add_column(col, justify="left" if col == "deployment" else "right")
    for i, c in enumerate(outcome.candidates):
        m = c["metrics"]
        label = c["label"]
        if c.get("varied"):
            knobs = "; ".join(
                f"{k.rsplit('.', 1)[-1]} {', '.join(map(str, v))}" for k, v in c["varied"].items()
            )
            label = Text(label).append(f"\n  the same with {knobs}", style="dim")
        t.add_row(
            str(i + 1),
            label,
            *([c.get("precision") or "bf16"] if shown else []),
            str(c["num_gpus"]),
            f"{c['gpu_hours']:.2f}",
            f"{c['dollars']:.2f}",
            f"{m['ttft_p99_s']:.3f}",
            f"{m['tpot_p99_s'] * 1e3:.1f}" if m.get("tpot_p99_s") is not None else "—",
            *([f"{m.get('prefix_cache_hit_rate', 0.0):.1%}"] if cached else []),
        )
    return t
