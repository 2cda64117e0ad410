"""``tidal plan``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from rich.table import Table

from tidal.cli import Opt, TidalError, _deep_merge, _fail, _set, app, console, err_console


def _list(text: str | None) -> list[Any] | None:
    from tidal.experiments.grid import parse_value

    if text is None:
        return None
    return [parse_value(v) for v in text.split(",") if v.strip()]


def _pairs(text: str | None, field: str) -> dict[str, Any]:
    from tidal.experiments.grid import parse_value

    out: dict[str, Any] = {}
    for part in (text or "").split(","):
        if not part.strip():
            continue
        key, sep, val = part.partition("=")
        if not sep:
            raise TidalError(f"{field}: {part!r} is not KEY=VALUE")
        out[key.strip()] = parse_value(val)
    return out


@app.command()
def plan(
    out: Annotated[Path, Opt(help="Output directory (plan.json, evaluations.parquet, runs/).")],
    trace: Annotated[str | None, Opt(help="Trace to plan for (Azure CSV, Mooncake, ...).")] = None,
    rate_scale: Annotated[float | None, Opt(help="Multiply the trace's arrival rate.")] = None,
    start_s: Annotated[float | None, Opt(help="Trace window start (s).")] = None,
    end_s: Annotated[float | None, Opt(help="Trace window end (s).")] = None,
    max_requests: Annotated[int | None, Opt(help="Keep the first N requests.")] = None,
    model: Annotated[str | None, Opt(help="Model id (default llama-3.1-8b).")] = None,
    gpus: Annotated[str | None, Opt(help="GPU types to consider, e.g. h100,h200,l40s.")] = None,
    tp: Annotated[str | None, Opt(help="Tensor-parallel degrees, e.g. 1,2,4.")] = None,
    batching: Annotated[str | None, Opt(help="Batching policies (default: all).")] = None,
    ordering: Annotated[str | None, Opt(help="Request orderings (default: all).")] = None,
    token_budget: Annotated[str | None, Opt(help="Token budgets, e.g. 512,2048,8192.")] = None,
    max_seqs: Annotated[str | None, Opt(help="Max running requests, e.g. 128,256.")] = None,
    search: Annotated[
        list[str] | None, Opt(help="More axes: KEY=V1,V2 over a dotted config key.")
    ] = None,
    slo_ttft_p99: Annotated[float | None, Opt(help="p99 TTFT target (s).")] = None,
    slo_tpot_p99: Annotated[float | None, Opt(help="p99 TPOT target (s).")] = None,
    slo: Annotated[
        str | None, Opt(help="Targets as ttft_p99=2,tpot_p99=0.1 (any ttft/tpot/e2e p50/90/99).")
    ] = None,
    max_replicas: Annotated[int | None, Opt(help="Most replicas per option (default 16).")] = None,
    router: Annotated[str | None, Opt(help="round-robin | least-loaded | prefix-aware.")] = None,
    objective: Annotated[str | None, Opt(help="gpu_hours (default) | dollars.")] = None,
    top: Annotated[int | None, Opt(help="How many cheapest deployments to return.")] = None,
    prices: Annotated[str | None, Opt(help="USD per GPU-hour, e.g. h100=2.5,l40s=0.9.")] = None,
    config: Annotated[Path | None, Opt(help="Plan YAML (base, search, slo, ...).")] = None,
    exhaustive: Annotated[
        bool, Opt("--exhaustive", help="Simulate every option at every replica count.")
    ] = False,
) -> None:
    """Find the cheapest deployment (GPU type and count, TP, policies) meeting the SLO."""
    from tidal.experiments.grid import parse_grid_arg
    from tidal.experiments.planner import plan as run_plan
    from tidal.experiments.planner import write_plan
    from tidal.experiments.space import load_plan_spec
    from tidal.sim.config import load_yaml

    try:
        data: dict[str, Any] = load_yaml(config) if config else {}
        flags: dict[str, Any] = {}
        for key, val in (
            ("base.model", model),
            ("base.workload.trace", trace),
            ("base.workload.rate_scale", rate_scale),
            ("base.workload.start_s", start_s),
            ("base.workload.end_s", end_s),
            ("base.workload.max_requests", max_requests),
            ("max_replicas", max_replicas),
            ("router", router),
            ("objective", objective),
            ("top", top),
        ):
            _set(flags, key, val)
        axes: dict[str, Any] = {}
        for key, text in (
            ("gpu", gpus),
            ("tp", tp),
            ("scheduler.batching", batching),
            ("scheduler.ordering", ordering),
            ("scheduler.token_budget", token_budget),
            ("scheduler.max_seqs", max_seqs),
        ):
            values = _list(text)
            if values is not None:
                axes[key] = values
        for arg in search or []:
            key, values = parse_grid_arg(arg)
            axes[key] = values
        targets = {f"{k}_s": v for k, v in _pairs(slo, "slo").items()}
        if slo_ttft_p99 is not None:
            targets["ttft_p99_s"] = slo_ttft_p99
        if slo_tpot_p99 is not None:
            targets["tpot_p99_s"] = slo_tpot_p99
        data = _deep_merge(data, flags)
        data["search"] = {**data.get("search", {}), **axes}
        if targets:
            data["slo"] = {**data.get("slo", {}), **targets}
        if prices:
            data["prices"] = {**data.get("prices", {}), **_pairs(prices, "prices")}
        data.setdefault("base", {}).setdefault("model", "llama-3.1-8b")
        if "trace" not in data["base"].get("workload", {}) and "num_requests" not in data[
            "base"
        ].get("workload", {}):
            raise TidalError("trace: give --trace PATH (or a base workload in --config)")
        spec = load_plan_spec(data)

        def show(ev: Any) -> None:
            verdict = (
                "meets"
                if ev.passed
                else ("misses (stopped early)" if ev.stopped_early else "misses")
            )
            err_console.print(
                f"  {ev.capacity:>3}× {ev.option.label}: {verdict} the SLO", highlight=False
            )

        outcome = run_plan(spec, exhaustive=exhaustive, on_evaluation=show)
        write_plan(outcome, out)
    except TidalError as err:
        _fail(err)
        return
    t = Table(title=f"cheapest deployments meeting {spec.targets()} ({spec.objective})")
    for col in ("#", "deployment", "GPUs", "GPU-hours", "$", "TTFT p99 s", "TPOT p99 ms"):
        t.add_column(col, justify="left" if col == "deployment" else "right")
    for i, c in enumerate(outcome.candidates):
        m = c["metrics"]
        t.add_row(
            str(i + 1),
            c["label"],
            str(c["num_gpus"]),
            f"{c['gpu_hours']:.2f}",
            f"{c['dollars']:.2f}",
            f"{m['ttft_p99_s']:.3f}",
            f"{m['tpot_p99_s'] * 1e3:.1f}" if m.get("tpot_p99_s") is not None else "—",
        )
    console.print(t)
    if not outcome.candidates:
        console.print("[bold]no deployment in the search space meets the SLO[/]")
    console.print(
        f"{outcome.simulations_run} simulations (the exhaustive grid: "
        f"{outcome.exhaustive_simulations}) in {outcome.wall_s:.1f} s; plan in {out / 'plan.json'}"
    )
