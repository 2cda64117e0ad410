"""``tidal bench serve``: measure a live OpenAI-compatible server (vLLM, SGLang, ``tidal
serve``) with vLLM ``bench serve``'s flags; results in the simulator's layout
(:mod:`tidal.measure.results`), so ``tidal report``, ``tidal simulate --trace
DIR/requests.parquet`` and ``tidal fidelity --measured DIR`` read them."""

from __future__ import annotations

import asyncio
import math
import os
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from tidal.cli import Opt, TidalError, _fail, app, console, err_console, metrics_table

bench_app = typer.Typer(help="Measure a live server.", no_args_is_help=True)
app.add_typer(bench_app, name="bench")


@bench_app.command("serve")
def bench_serve(
    base_url: Annotated[str, Opt(help="Server root, e.g. http://127.0.0.1:8000.")] = (
        "http://127.0.0.1:8000"
    ),
    model: Annotated[
        str | None, Opt(help="Model name sent (default: the first of GET /v1/models).")
    ] = None,
    endpoint: Annotated[
        str, Opt(help="/v1/completions or /v1/chat/completions.")
    ] = "/v1/completions",
    dataset_name: Annotated[str, Opt(help="random | sharegpt | trace.")] = "random",
    dataset_path: Annotated[
        Path | None, Opt(help="ShareGPT JSON, or a trace (Azure, Mooncake, requests.parquet).")
    ] = None,
    num_prompts: Annotated[int, Opt(help="Requests to send.")] = 1000,
    request_rate: Annotated[
        str, Opt(help="Requests per second (Gamma arrivals), or inf: all at once.")
    ] = "inf",
    burstiness: Annotated[
        float, Opt(help="Gamma shape of the gaps: 1 Poisson, < 1 burstier.")
    ] = 1.0,
    max_concurrency: Annotated[
        int | None, Opt(help="Requests in flight at most (default: unbounded).")
    ] = None,
    random_input_len: Annotated[int, Opt(help="Prompt tokens (random dataset).")] = 1024,
    random_output_len: Annotated[int, Opt(help="max_tokens (random dataset).")] = 128,
    random_range_ratio: Annotated[
        float, Opt(help="Lengths uniform in [L(1-r), L(1+r)] (random dataset).")
    ] = 0.0,
    sharegpt_output_len: Annotated[
        int | None, Opt(help="max_tokens of every ShareGPT request (default: the reply's).")
    ] = None,
    ignore_eos: Annotated[bool, Opt(help="Send ignore_eos: outputs run to max_tokens.")] = False,
    seed: Annotated[int, Opt(help="Seed of prompts, lengths and arrivals.")] = 0,
    goodput: Annotated[
        list[str] | None, Opt(help="SLOs in ms, e.g. --goodput ttft:500 --goodput tpot:50.")
    ] = None,
    save_result: Annotated[bool, Opt(help="Write the results to --result-dir.")] = False,
    result_dir: Annotated[
        Path | None, Opt(help="Results directory (implies --save-result; default out/bench).")
    ] = None,
    api_key: Annotated[str | None, Opt(help="Bearer key (default: $OPENAI_API_KEY).")] = None,
    request_timeout: Annotated[float, Opt(help="Seconds one request may take.")] = 600.0,
) -> None:
    """Send NUM_PROMPTS streamed requests and report TTFT, TPOT, ITL and E2E per request."""
    params = _config(dict(locals()))
    from tidal.measure.dataset import build_requests
    from tidal.measure.results import parse_goodput
    from tidal.measure.runner import BenchSettings, served_model

    try:
        import httpx2  # noqa: F401
    except ImportError as err:
        _fail(TidalError(f"{err}; install the client with: pip install httpx2"))
        return
    key = api_key or os.environ.get("OPENAI_API_KEY")
    try:
        rate = float(request_rate)
        slos = parse_goodput(goodput)
        name = model or asyncio.run(served_model(base_url, key))
        reqs = build_requests(
            dataset_name,
            num_prompts,
            seed,
            dataset_path=dataset_path,
            input_len=random_input_len,
            output_len=random_output_len,
            range_ratio=random_range_ratio,
            sharegpt_output_len=sharegpt_output_len,
            chat="chat" in endpoint,
        )
        settings = BenchSettings(
            base_url,
            endpoint,
            name,
            rate,
            burstiness,
            max_concurrency,
            seed,
            ignore_eos,
            key,
            request_timeout,
        )
        out = result_dir or (Path("out/bench") if save_result else None)
        summary = run_bench(settings, reqs, slos, out, config=params)
    except ValueError as err:
        _fail(TidalError(f"request-rate: {request_rate!r} is not a number ({err})"))
        return
    except TidalError as err:
        _fail(err)
        return
    m = summary["metrics"]
    console.print(metrics_table(f"{name} at {base_url}", {"measured": m}))
    console.print(
        f"sent {m['num_requests']}: completed {m['num_completed']}, failed {m['num_failed']}"
        + (f"; results in {out}" if out else "")
    )


def _config(args: dict[str, Any]) -> dict[str, Any]:
    """The command's flags as recorded in ``summary.json`` (the API key left out)."""
    return {k: str(v) if isinstance(v, Path) else v for k, v in args.items() if k != "api_key"}


def run_bench(
    settings: Any,
    reqs: list[Any],
    slos: dict[str, float],
    out: Path | None,
    config: dict[str, Any] | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Run the benchmark, write ``out`` (when given) and return ``summary.json``'s content."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    from tidal.measure.results import columns, measured_metrics
    from tidal.measure.runner import run_requests
    from tidal.report.results import summary_dict, write_run

    bar = Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        "failed {task.fields[failed]}",
        TimeElapsedColumn(),
        console=err_console,
        transient=True,
        disable=not (progress and err_console.is_terminal),
    )
    failed = 0
    with bar:
        task = bar.add_task("requests", total=len(reqs), failed=0)

        def on_done(_: int, res: Any) -> None:
            nonlocal failed
            failed += 0 if res.success else 1
            bar.update(task, advance=1, failed=failed)

        t0 = time.perf_counter()
        results, start = asyncio.run(run_requests(settings, reqs, on_done))
        wall = time.perf_counter() - t0
    cols = columns(reqs, results, start)
    metrics = measured_metrics(cols, slos)
    cfg = dict(config or {})
    cfg.update(
        {
            "backend": "measured",
            "base_url": settings.base_url,
            "model": settings.model,
            "request_rate": None if math.isinf(settings.request_rate) else settings.request_rate,
            "goodput_slo_s": slos,
        }
    )
    if out is not None:
        errors = sorted({r.error for r in results if r.error})[:20]
        write_run(out, cfg, settings.seed, metrics, cols, {"wall_s": wall, "errors": errors})
    return summary_dict(cfg, settings.seed, metrics)
