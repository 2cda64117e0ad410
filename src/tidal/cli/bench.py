"""``tidal bench serve``: measure a live OpenAI-compatible server (vLLM, SGLang, ``tidal
serve``) with vLLM ``bench serve``'s flags; results in the simulator's layout
(:mod:`tidal.measure.results`), so ``tidal report``, ``tidal simulate --trace
DIR/requests.parquet`` and ``tidal fidelity --measured DIR`` read them.

vLLM's forms are accepted: ``--goodput ttft:500 tpot:50`` (several SLOs after one flag),
``--host``/``--port`` (instead of ``--base-url``), ``--backend openai|vllm`` (completions) or
``openai-chat`` (chat), ``--percentile-metrics ttft,tpot,itl,e2el`` with
``--metric-percentiles 50,99`` (extra percentiles in the summary and the printout). Failed
requests are counted by reason (``HTTP 429``, ``ReadTimeout``...) in the printout and in
``summary.json`` (``failure_reasons``)."""

from __future__ import annotations

import asyncio
import math
import os
import time
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer

from tidal.cli.app import Opt, TidalError, _fail, app, console, err_console, metrics_table

bench_app = typer.Typer(help="Measure a live server.", no_args_is_help=True)
app.add_typer(bench_app, name="bench")


BACKENDS = {"openai": "/v1/completions", "vllm": "/v1/completions"}
BACKENDS["openai-chat"] = "/v1/chat/completions"
PERCENTILE_METRICS = ("ttft", "tpot", "itl", "e2el")


@bench_app.command("serve", context_settings={"allow_extra_args": True})
def bench_serve(
    ctx: typer.Context,
    base_url: Annotated[
        str | None, Opt(help="Server root (default http://HOST:PORT, 127.0.0.1:8000).")
    ] = None,
    host: Annotated[str, Opt(help="Server host, with --port (vLLM's; or --base-url).")] = (
        "127.0.0.1"
    ),
    port: Annotated[int, Opt(help="Server port (vLLM's).")] = 8000,
    backend: Annotated[
        str | None, Opt(help="openai | vllm (/v1/completions) | openai-chat (chat).")
    ] = None,
    model: Annotated[
        str | None, Opt(help="Model name sent (default: the first of GET /v1/models).")
    ] = None,
    endpoint: Annotated[
        str | None, Opt(help="/v1/completions (default) or /v1/chat/completions.")
    ] = None,
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
        list[str] | None, Opt(help="SLOs in ms, vLLM's form: --goodput ttft:500 tpot:50.")
    ] = None,
    percentile_metrics: Annotated[
        str, Opt(help="Metrics with percentiles (vLLM's): ttft,tpot,itl,e2el.")
    ] = "ttft,tpot,itl",
    metric_percentiles: Annotated[
        str, Opt(help="Percentiles of those metrics (vLLM's), e.g. 25,50,99.")
    ] = "99",
    save_result: Annotated[bool, Opt(help="Write the results to --result-dir.")] = False,
    result_dir: Annotated[
        Path | None, Opt(help="Results directory (implies --save-result; default out/bench).")
    ] = None,
    api_key: Annotated[str | None, Opt(help="Bearer key (default: $OPENAI_API_KEY).")] = None,
    request_timeout: Annotated[float, Opt(help="Seconds one request may take.")] = 600.0,
) -> None:
    """Send NUM_PROMPTS streamed requests and report TTFT, TPOT, ITL and E2E per request."""
    goodput = [*(goodput or []), *_goodput_extras(ctx.args)]
    base_url = base_url or f"http://{host}:{port}"
    endpoint = _endpoint(backend, endpoint)
    pcts = _percentiles(percentile_metrics, metric_percentiles)
    args = dict(locals())
    params = _config({k: v for k, v in args.items() if k not in ("ctx", "pcts")})
    # lazy: keeps tidal --help fast
    from tidal.measure.dataset import build_requests
    from tidal.measure.results import parse_goodput
    from tidal.measure.runner import BenchSettings, served_model

    try:
        # lazy: checks that the optional extra is installed
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
        summary = run_bench(settings, reqs, slos, out, config=params, percentiles=pcts)
    except ValueError as err:
        _fail(TidalError(f"request-rate: {request_rate!r} is not a number ({err})"))
        return
    except TidalError as err:
        _fail(err)
        return
    m = summary["metrics"]
    console.print(metrics_table(f"{name} at {base_url}", {"measured": m}))
    extra = [
        f"{k} {m[f'{k}_p{p:g}_s'] * 1e3:.1f} ms"
        for k, ps in pcts.items()
        for p in ps
        if m.get(f"{k}_p{p:g}_s") is not None
    ]
    if extra:
        console.print("percentiles: " + ", ".join(extra), soft_wrap=True)
    reasons = summary.get("failure_reasons") or {}
    why = " (" + ", ".join(f"{k}: {v}" for k, v in reasons.items()) + ")" if reasons else ""
    console.print(
        f"sent {m['num_requests']}: completed {m['num_completed']}, failed {m['num_failed']}"
        + why
        + (f"; results in {out}" if out else ""),
        soft_wrap=True,
    )


def _goodput_extras(extra: list[str]) -> list[str]:
    """Arguments after ``--goodput KEY:MS`` (vLLM's nargs='+'): more SLOs, nothing else."""
    from tidal.measure.results import GOODPUT_KEYS  # lazy: keeps tidal --help fast

    for a in extra:
        if a.partition(":")[0] not in GOODPUT_KEYS:
            _fail(TidalError(f"unexpected argument {a!r} (SLOs after --goodput: ttft:MS ...)"))
    return list(extra)


def _endpoint(backend: str | None, endpoint: str | None) -> str:
    if backend is None:
        return endpoint or "/v1/completions"
    if backend not in BACKENDS:
        _fail(TidalError(f"backend: {backend!r} is not one of {', '.join(BACKENDS)}"))
    if endpoint is not None and endpoint != BACKENDS[backend]:
        _fail(TidalError(f"backend: {backend} sends to {BACKENDS[backend]}, not {endpoint}"))
    return BACKENDS[backend]


def _percentiles(metrics: str, percentiles: str) -> dict[str, list[float]]:
    """``ttft,tpot`` × ``50,99`` → ``{"ttft": [50, 99], "tpot": [50, 99]}``."""
    names = [m.strip() for m in metrics.split(",") if m.strip()]
    bad = [m for m in names if m not in PERCENTILE_METRICS]
    if bad:
        _fail(TidalError(f"percentile-metrics: unknown {bad} (use {','.join(PERCENTILE_METRICS)})"))
    try:
        ps = [float(p) for p in percentiles.split(",") if p.strip()]
    except ValueError:
        ps = [float("nan")]
    if not ps or not all(0 < p <= 100 for p in ps):
        _fail(TidalError(f"metric-percentiles: {percentiles!r} (give numbers in (0, 100])"))
    return dict.fromkeys(names, ps)


def failure_reasons(errors: list[str]) -> dict[str, int]:
    """Failed requests by reason: ``HTTP 429``, ``ReadTimeout``, ``stream error``...,
    most frequent first."""
    counts: dict[str, int] = {}
    for e in errors:
        if e:
            key = e.split(":", 1)[0].strip() or "error"
            counts[key] = counts.get(key, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


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
    percentiles: dict[str, list[float]] | None = None,
) -> dict[str, Any]:
    """Run the benchmark, write ``out`` (when given) and return ``summary.json``'s content."""
    # lazy: keeps tidal --help fast
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
    metrics.update(extra_percentiles(cols, percentiles or {}))
    reasons = failure_reasons([r.error for r in results])
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
        extras = {"wall_s": wall, "errors": errors, "failure_reasons": reasons}
        write_run(
            out,
            cfg,
            settings.seed,
            metrics,
            cols,
            extras,
            extra_summary={"failure_reasons": reasons},
        )
    summary = summary_dict(cfg, settings.seed, metrics)
    summary["failure_reasons"] = reasons
    return summary


def extra_percentiles(cols: dict[str, Any], pcts: dict[str, list[float]]) -> dict[str, float]:
    """``{metric}_p{p}_s`` over completed requests (ITL: over every gap), for ``--percentile-
    metrics``/``--metric-percentiles`` (vLLM's ``e2el`` is Tidal's ``e2e``)."""
    from tidal.core.metrics import request_latencies  # lazy: keeps tidal --help fast

    lat = request_latencies(cols)
    done = np.asarray(cols["success"], dtype=bool)
    out: dict[str, float] = {}
    for name, ps in pcts.items():
        if name == "itl":
            x = np.array([g for row in cols["itl_ns"] for g in row], dtype=np.float64) / 1e9
        else:
            x = np.asarray(lat[f"{'e2e' if name == 'e2el' else name}_s"], dtype=np.float64)[done]
        x = x[np.isfinite(x)]
        if len(x):
            for p in ps:
                out[f"{name}_p{p:g}_s"] = float(np.percentile(x, p))
    return out
