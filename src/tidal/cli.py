"""The ``tidal`` command line. Heavy imports stay inside the commands."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from tidal.core.errors import TidalError

app = typer.Typer(
    help="Tidal: LLM serving — an exact fast simulator and a real engine under one scheduler.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
trace_app = typer.Typer(help="Inspect workload traces.", no_args_is_help=True)
app.add_typer(trace_app, name="trace")
console = Console()
err_console = Console(stderr=True)

Opt = typer.Option


def _fail(err: Exception) -> None:
    err_console.print(f"[bold red]error:[/] {err}")
    raise typer.Exit(2)


def _set(d: dict[str, Any], dotted: str, value: Any) -> None:
    if value is None:
        return
    keys = dotted.split(".")
    for k in keys[:-1]:
        d = d.setdefault(k, {})
    d[keys[-1]] = value


def _parse_rate(rate: str | None) -> float | None:
    if rate is None:
        return None
    try:
        value = float(rate)
    except ValueError:
        raise TidalError(f"rate: {rate!r} is not a number (give req/s, or inf)") from None
    if math.isnan(value) or value <= 0:
        raise TidalError(f"rate: must be > 0 requests per second or inf, got {rate}")
    return value


def _deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _deep_merge(out[k], v)
        else:
            out[k] = v
    return out


def metrics_table(title: str, rows: dict[str, dict[str, Any]]) -> Table:
    """One column per run, one row per headline metric."""
    keys = [
        ("num_completed", "completed", "{:.0f}"),
        ("request_throughput", "req/s", "{:.3f}"),
        ("token_throughput", "tok/s (in+out)", "{:,.0f}"),
        ("roofline_token_throughput", "roofline tok/s", "{:,.0f}"),
        ("ttft_p50_s", "TTFT p50 s", "{:.3f}"),
        ("ttft_p99_s", "TTFT p99 s", "{:.3f}"),
        ("tpot_p50_s", "TPOT p50 ms", "ms"),
        ("tpot_p99_s", "TPOT p99 ms", "ms"),
        ("itl_p99_s", "ITL p99 ms", "ms"),
        ("e2e_p50_s", "E2E p50 s", "{:.2f}"),
        ("e2e_p99_s", "E2E p99 s", "{:.2f}"),
        ("goodput", "goodput req/s", "{:.3f}"),
        ("slo_attainment", "SLO attainment", "{:.1%}"),
        ("num_preemptions", "preemptions", "{:.0f}"),
    ]
    extra = sorted({k for r in rows.values() for k in r} & {"mode_switches", "eb_time_share"})
    keys += [(k, k, "{:.3f}") for k in extra]
    t = Table(title=title)
    t.add_column("metric")
    for name in rows:
        t.add_column(name, justify="right")
    for key, label, fmt in keys:
        cells = []
        for r in rows.values():
            v = r.get(key)
            if v is None:
                cells.append("—")
            elif fmt == "ms":
                cells.append(f"{v * 1e3:.1f}")
            else:
                cells.append(fmt.format(v))
        t.add_row(label, *cells)
    return t


def _run_and_write(cfg: Any, out: Path | None, show_progress: bool = True) -> Any:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    from tidal.report.results import write_run
    from tidal.sim.run import load_requests, run_simulation

    reqs = load_requests(cfg)
    if show_progress and len(reqs) >= 20_000 and sys.stderr.isatty():
        with Progress(
            "[progress.description]{task.description}", BarColumn(), MofNCompleteColumn(),
            TimeElapsedColumn(), console=err_console, transient=True,
        ) as bar:
            task = bar.add_task("simulating", total=len(reqs))
            result = run_simulation(
                cfg, reqs, progress=lambda done, total: bar.update(task, completed=done)
            )
    else:
        result = run_simulation(cfg, reqs)
    if out is not None:
        write_run(
            out,
            cfg.model_dump(mode="json"),
            cfg.seed,
            result.metrics,
            result.columns,
            result.run_info,
            extra_tables=result.extras.get("tables"),
            extra_json=result.extras.get("json"),
        )
    return result


@app.command()
def simulate(
    out: Annotated[Path | None, Opt(help="Output directory (summary.json, requests.parquet).")] = None,
    config: Annotated[Path | None, Opt(help="YAML config; flags override its values.")] = None,
    model: Annotated[str | None, Opt(help="Model id, e.g. llama-3.1-8b, qwen3-8b.")] = None,
    gpu: Annotated[str | None, Opt(help="GPU id: h100 h200 a100-80gb l40s rtx-pro-6000 b200.")] = None,
    tp: Annotated[int | None, Opt(help="Tensor-parallel degree.")] = None,
    perf_model: Annotated[str | None, Opt(help="auto | roofline | linear.")] = None,
    trace: Annotated[str | None, Opt(help="Trace to replay (Azure CSV, Mooncake JSONL, ServeGen).")] = None,
    max_requests: Annotated[int | None, Opt(help="Keep the first N requests of the trace.")] = None,
    rate_scale: Annotated[float | None, Opt(help="Multiply the trace's arrival rate.")] = None,
    start_s: Annotated[float | None, Opt(help="Trace window start (s from first arrival).")] = None,
    end_s: Annotated[float | None, Opt(help="Trace window end (s from first arrival).")] = None,
    num_requests: Annotated[int | None, Opt(help="Synthetic: number of requests.")] = None,
    rate: Annotated[str | None, Opt(help="Synthetic: arrival rate in req/s, or inf.")] = None,
    arrival_cv: Annotated[float | None, Opt(help="Synthetic: inter-arrival CV (1 = Poisson).")] = None,
    prompt_len: Annotated[int | None, Opt(help="Synthetic: prompt length (location).")] = None,
    output_len: Annotated[int | None, Opt(help="Synthetic: output length (location).")] = None,
    length_dist: Annotated[str | None, Opt(help="fixed|uniform|geometric|lognormal|empirical:NAME.")] = None,
    max_prompt_len: Annotated[int | None, Opt(help="Cap prompt lengths.")] = None,
    max_output_len: Annotated[int | None, Opt(help="Cap output lengths.")] = None,
    concurrency: Annotated[int | None, Opt(help="Closed loop: requests kept in flight.")] = None,
    batching: Annotated[str | None, Opt(help="Batching policy (mb, ...).")] = None,
    ordering: Annotated[str | None, Opt(help="Waiting-queue ordering (fcfs, ...).")] = None,
    token_budget: Annotated[int | None, Opt(help="Max tokens per step (B).")] = None,
    max_seqs: Annotated[int | None, Opt(help="Max running requests (N).")] = None,
    gpu_memory_utilization: Annotated[float | None, Opt(help="Share of GPU memory used.")] = None,
    slo_ttft: Annotated[float | None, Opt(help="TTFT SLO in seconds.")] = None,
    slo_tpot: Annotated[float | None, Opt(help="TPOT SLO in seconds.")] = None,
    seed: Annotated[int | None, Opt(help="Run seed.")] = None,
    no_fast_forward: Annotated[bool, Opt("--no-fast-forward", help="Simulate every step.")] = False,
) -> None:
    """Simulate one serving instance on a trace or a synthetic workload."""
    from tidal.sim.config import load_config, load_yaml

    try:
        data: dict[str, Any] = load_yaml(config) if config else {}
        flags: dict[str, Any] = {}
        for key, val in (
            ("model", model), ("gpu", gpu), ("tp", tp), ("perf_model", perf_model),
            ("workload.trace", trace), ("workload.max_requests", max_requests),
            ("workload.rate_scale", rate_scale), ("workload.start_s", start_s),
            ("workload.end_s", end_s), ("workload.num_requests", num_requests),
            ("workload.rate", _parse_rate(rate)), ("workload.arrival_cv", arrival_cv),
            ("workload.prompt_len", prompt_len), ("workload.output_len", output_len),
            ("workload.length_dist", length_dist), ("workload.max_prompt_len", max_prompt_len),
            ("workload.max_output_len", max_output_len), ("workload.concurrency", concurrency),
            ("scheduler.batching", batching), ("scheduler.ordering", ordering),
            ("scheduler.token_budget", token_budget), ("scheduler.max_seqs", max_seqs),
            ("memory.gpu_memory_utilization", gpu_memory_utilization),
            ("slo.ttft_s", slo_ttft), ("slo.tpot_s", slo_tpot), ("seed", seed),
        ):
            _set(flags, key, val)
        if no_fast_forward:
            flags["fast_forward"] = False
        data = _deep_merge(data, flags)
        data.setdefault("workload", {})
        cfg = load_config(data)
        result = _run_and_write(cfg, out)
    except TidalError as err:
        _fail(err)
        return
    title = f"{cfg.model} on {cfg.tp}× {cfg.gpu}, {cfg.scheduler.batching}"
    console.print(metrics_table(title, {"this run": result.metrics}))
    info = result.run_info
    console.print(
        f"simulated {result.metrics['num_requests']:,} requests in {info['simulate_s']:.2f} s "
        f"({info['simulated_requests_per_s']:,.0f} req/s, {info['num_events']:,} events)"
        + (f"; results in {out}" if out else "")
    )


@app.command()
def demo(
    out: Annotated[Path, Opt(help="Output directory (one sub-directory per variant).")] = Path(
        "tidal-demo"
    ),
    config: Annotated[Path | None, Opt(help="A demo YAML with `base` and `variants`.")] = None,
) -> None:
    """Replay a real trace through several configurations and compare them side by side."""
    import importlib.resources

    import yaml

    from tidal.sim.config import load_config, load_yaml

    try:
        if config is None:
            text = importlib.resources.files("tidal.configs").joinpath("demo.yaml").read_text()
            spec = yaml.safe_load(text)
        else:
            spec = load_yaml(config)
        base = spec.get("base", {})
        rows: dict[str, dict[str, Any]] = {}
        for name, over in spec.get("variants", {}).items():
            cfg = load_config(_deep_merge(base, over or {}))
            res = _run_and_write(cfg, out / name, show_progress=False)
            rows[name] = res.metrics
            console.print(
                f"  {name}: {res.metrics['num_requests']:,} requests simulated in "
                f"{res.run_info['simulate_s']:.2f} s"
            )
    except TidalError as err:
        _fail(err)
        return
    w = base.get("workload", {})
    title = (
        f"{base.get('model')} on {base.get('gpu')} — {w.get('trace')} ×{w.get('rate_scale', 1)}"
    )
    console.print(metrics_table(title, rows))
    console.print(f"results in {out}/<variant>/summary.json")


@trace_app.command("info")
def trace_info_cmd(
    path: Annotated[str, typer.Argument(help="Trace file (or a name under shared/traces).")],
    fmt: Annotated[str, Opt("--format", help="auto | azure | mooncake | servegen.")] = "auto",
) -> None:
    """Rows, span, rates, burstiness and length statistics of a trace."""
    from tidal.workload.info import trace_info

    try:
        info = trace_info(path, fmt)
    except TidalError as err:
        _fail(err)
        return
    t = Table(title=str(path))
    t.add_column("statistic")
    t.add_column("value", justify="right")
    for k, v in info.items():
        t.add_row(k, f"{v:,.4g}" if isinstance(v, float) else str(v))
    console.print(t)


def main() -> None:  # pragma: no cover
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
