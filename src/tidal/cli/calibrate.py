"""``tidal calibrate``: profile the real engine's steps, fit a step-time model for this machine."""

from __future__ import annotations

import platform
import time
from pathlib import Path
from typing import Annotated, Any

import numpy as np
from pydantic import ValidationError

from tidal.cli.app import Opt, TidalError, _fail, app, console, err_console
from tidal.core.clock import CLOCK_CHOICES, resolve_clock
from tidal.workload.lengths import uniform_bounds

GRID_TOKENS = 16384
"""Decode grid points hold at most this many context tokens (B·L)."""


def runtime_config(**kw: Any) -> Any:
    """A ``RuntimeConfig``; pydantic errors become readable ``TidalError``s."""
    # lazy: keeps tidal --help fast
    from tidal.runtime.config import RuntimeConfig
    from tidal.sim.config import format_validation_error

    try:
        return RuntimeConfig(**kw)
    except ValidationError as err:
        raise TidalError(format_validation_error(err)) from None


def machine_info(threads: int | None) -> dict[str, Any]:
    import torch  # lazy: optional dependency (torch)

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpu": cpu,
        "torch": torch.__version__,
        "threads": threads if threads is not None else torch.get_num_threads(),
        "python": platform.python_version(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
    }


def _fit(samples: list[Any], fit_on: str = "all") -> tuple[dict[str, float], Any]:
    """Fit the profile to every sample, or (``fit_on="serving"``) to the serving points' steps
    only, whose shapes are those of the workload when the points are matched to it; the
    relative errors returned are those of every sample under that fit."""
    # lazy: keeps tidal --help fast
    from tidal.hardware.profiled import ProfiledPerfModel, fit_profile

    if fit_on == "all":
        return fit_profile(
            [s.shape for s in samples],
            [s.seconds for s in samples],
            idle_s=[s.idle_s for s in samples],
        )
    chosen = [s for s in samples if s.point.startswith("serving")]
    if not chosen:
        raise TidalError("fit-on: serving needs the serving points (drop --no-serving)")
    coef, _ = fit_profile(
        [s.shape for s in chosen],
        [s.seconds for s in chosen],
        idle_s=[s.idle_s for s in chosen],
    )
    model = ProfiledPerfModel(coef)
    pred = np.array(
        [model.step_seconds(*s.shape) + model.idle_penalty_seconds(s.idle_s) for s in samples]
    )
    t = np.array([s.seconds for s in samples])
    return coef, (pred - t) / t


def serving_options(
    prompt_len: int | None, output_len: int | None, token_budget: int, concurrency: str
) -> dict[str, Any]:
    """Keyword arguments of :func:`~tidal.runtime.profiling.serving_grid` from the CLI flags:
    lengths uniform on ``[L/2, 3L/2]`` (the workload's ``uniform`` distribution, jitter ½)."""
    kw: dict[str, Any] = {}
    for flag, value, key in (
        ("serving-prompt-len", prompt_len, "prompt_range"),
        ("serving-output-len", output_len, "output_range"),
    ):
        if value is not None:
            if value < 1:
                raise TidalError(f"{flag}: must be >= 1 (got {value})")
            kw[key] = uniform_bounds(value, 0.5)
    if token_budget < 0:
        raise TidalError(f"serving-token-budget: must be >= 0 (got {token_budget})")
    kw["token_budget"] = token_budget
    try:
        conc = tuple(int(c) for c in concurrency.split(",") if c.strip())
    except ValueError:
        raise TidalError(
            f"serving-concurrency: {concurrency!r} is not a comma-separated list of integers"
        ) from None
    if not conc or min(conc) < 1:
        raise TidalError(f"serving-concurrency: need integers >= 1 (got {concurrency!r})")
    kw["concurrencies"] = conc
    return kw


@app.command()
def calibrate(
    out: Annotated[Path, Opt(help="Profile to write (JSON; use as perf_model profile:PATH).")],
    model: Annotated[str, Opt(help="Model to profile (catalog id).")] = "tiny-llama",
    threads: Annotated[int | None, Opt(help="CPU threads for torch (fix it: shared CPUs).")] = 1,
    repeats: Annotated[int, Opt(help="Passes over the grid (after one warm-up pass).")] = 3,
    max_batch: Annotated[int, Opt(help="Largest decode batch profiled.")] = 128,
    max_ctx: Annotated[int, Opt(help="Longest decode context profiled.")] = 1024,
    max_prompt: Annotated[int, Opt(help="Longest prompt profiled.")] = 2048,
    block_size: Annotated[int, Opt(help="Tokens per KV block.")] = 16,
    device: Annotated[str, Opt(help="auto | cpu | cuda | cuda:N.")] = "auto",
    dtype: Annotated[str, Opt(help="float32 | bfloat16 | float16.")] = "float32",
    seed: Annotated[int, Opt(help="Seed of weights and prompts.")] = 0,
    serving: Annotated[
        bool, Opt(help="Also profile steady Poisson serving at a few concurrencies.")
    ] = True,
    clock: Annotated[
        str,
        Opt(
            help="auto (cpu on a CPU device, else wall) | wall | cpu: the engine thread's CPU "
            "time, other tenants skipped (shared machines)."
        ),
    ] = "auto",
    serving_prompt_len: Annotated[
        int | None,
        Opt(help="Serving points' prompts: uniform on L/2..3L/2 (as --length-dist uniform)."),
    ] = None,
    serving_output_len: Annotated[
        int | None, Opt(help="Serving points' outputs: uniform on L/2..3L/2.")
    ] = None,
    serving_token_budget: Annotated[
        int, Opt(help="Serving points' token budget (chunked prefill); 0: unchunked.")
    ] = 0,
    serving_concurrency: Annotated[
        str, Opt(help="Serving points: running requests to aim at, comma-separated.")
    ] = "2,8,32",
    fit_on: Annotated[
        str, Opt(help="all: fit every profiled step; serving: the serving points' steps only.")
    ] = "all",
    save_samples: Annotated[
        Path | None, Opt(help="Also write every profiled step (shape, seconds) as Parquet.")
    ] = None,
) -> None:
    """Profile prefill, decode and mixed steps over a grid of batch shapes; fit the profile."""
    try:
        # lazy: checks that the optional extra is installed
        import numpy as np

        from tidal.hardware.profiled import ProfiledPerfModel
        from tidal.report.io import write_json
        from tidal.runtime.config import build_engine, device_type
        from tidal.runtime.noise import LoadMeter
        from tidal.runtime.profiling import default_grid, probe, profile, serving_grid, warm_up
    except ImportError as err:
        _fail(TidalError(f"{err}; install the engine with: pip install 'tidal[engine]'"))
        return
    try:
        from tidal.core.outpath import check_out_file  # lazy: keeps tidal --help fast

        check_out_file(out, "out")  # before the profiling, not after it
        if save_samples is not None:
            check_out_file(save_samples, "save-samples")
        if repeats < 1:
            raise TidalError("repeats: must be >= 1")
        if clock not in CLOCK_CHOICES:
            raise TidalError(f"clock: unknown {clock!r} (valid: {', '.join(CLOCK_CHOICES)})")
        if fit_on not in ("all", "serving"):
            raise TidalError(f"fit-on: unknown {fit_on!r} (valid: all, serving)")
        if fit_on == "serving" and not serving:
            raise TidalError("fit-on: serving needs the serving points (drop --no-serving)")
        cfg = runtime_config(
            model=model,
            num_threads=threads,
            block_size=block_size,
            device=device,
            dtype=dtype,
            seed=seed,
            num_kv_blocks=-(-4 * max(GRID_TOKENS, max_prompt) // block_size),
        )
        clock = resolve_clock(clock, device_type(device))
        grid = default_grid(max_batch, max_ctx, max_prompt, GRID_TOKENS)
        serving_kw = serving_options(
            serving_prompt_len, serving_output_len, serving_token_budget, serving_concurrency
        )
        t0 = time.perf_counter()

        def progress(done: int, total: int) -> None:
            if done % max(1, total // 10) == 0:
                err_console.print(f"  profiled {done}/{total} grid points")

        meter = LoadMeter().start()
        probe_rt = build_engine(cfg)
        warm_up(probe_rt, clock)
        probe_before = probe(probe_rt, clock)
        samples = profile(cfg, grid, repeats, seed=seed, progress=progress, clock=clock)
        if serving:
            prelim = ProfiledPerfModel(_fit(samples)[0])
            points = serving_grid(prelim, max_batch=max_batch, **serving_kw)
            err_console.print(
                "  serving points: "
                + ", ".join(f"c={p.batch} at {p.rate:.1f} req/s" for p in points)
            )
            grid = grid + points
            samples += profile(cfg, points, repeats, seed=seed + 1, progress=progress, clock=clock)
        coef, rel = _fit(samples, fit_on)
        probe_after = probe(probe_rt, clock)
        kinds = np.array([s.point.split(":")[0] for s in samples])
        fit_err = {
            k: {
                "num_steps": int((kinds == k).sum()),
                "median_abs_rel_error": float(np.median(np.abs(rel[kinds == k]))),
                "p90_abs_rel_error": float(np.percentile(np.abs(rel[kinds == k]), 90)),
            }
            for k in sorted(set(kinds))
        }
        info: dict[str, Any] = {
            "model": model,
            "device": device,
            "clock": clock,
            "dtype": dtype,
            "block_size": block_size,
            "repeats": repeats,
            "fit_on": fit_on,
            "grid_points": len(grid),
            "serving_points": [
                {
                    "concurrency": p.batch,
                    "rate": p.rate,
                    "num_requests": p.num_requests,
                    "prompt_range": list(p.prompt_range),
                    "output_range": list(p.output_range),
                    "token_budget": p.chunk,
                }
                for p in grid
                if p.kind == "serving"
            ],
            "num_samples": len(samples),
            "profile_seconds": time.perf_counter() - t0,
            "fit_error": fit_err,
            "probe_s": (probe_before + probe_after) / 2,
            "probe_before_s": probe_before,
            "probe_after_s": probe_after,
            "machine": machine_info(threads),
            "noise": calibration_noise(meter.read(), samples, probe_before, probe_after),
        }
        prof = ProfiledPerfModel(coef, source=str(out), info=info)
        write_json(out, prof.to_json())
        if save_samples is not None:
            from tidal.report.io import write_parquet  # lazy: keeps tidal --help fast

            cols: dict[str, Any] = {
                name: np.array([getattr(s.shape, name) for s in samples], dtype=np.int64)
                for name in samples[0].shape._fields
            }
            cols["seconds"] = np.array([s.seconds for s in samples])
            cols["idle_s"] = np.array([s.idle_s for s in samples])
            cols["point"] = [s.point for s in samples]
            write_parquet(save_samples, cols)
    except TidalError as err:
        _fail(err)
        return
    console.print(f"profiled {len(samples)} steps of {model} in {info['profile_seconds']:.0f} s")
    for k, v in fit_err.items():
        console.print(
            f"  {k:8s} {v['num_steps']:5d} steps, fit |error| median "
            f"{v['median_abs_rel_error']:.1%}, p90 {v['p90_abs_rel_error']:.1%}"
        )
    drift = probe_after / probe_before - 1
    console.print(
        f"  speed probe (4 decodes): {probe_before * 1e3:.2f} ms per step before, "
        f"{probe_after * 1e3:.2f} ms after ({drift:+.1%} drift during profiling)"
    )
    penalty = [prof.idle_penalty_seconds(g) * 1e3 for g in (0.01, 0.1, 0.3)]
    console.print(
        "  idle penalty (first step after a pause of 10 / 100 / 300 ms): "
        + " / ".join(f"{p:.1f}" for p in penalty)
        + " ms"
    )
    console.print(f"profile written to {out}; simulate with --perf-model profile:{out}")
    warn_noise(info["noise"])


def calibration_noise(
    load: dict[str, Any], samples: list[Any], probe_before: float, probe_after: float
) -> dict[str, Any]:
    """The machine's load during profiling, the passes' spread and the probe's drift
    (:mod:`tidal.runtime.noise`), with a sentence for each beyond its limit."""
    from tidal.runtime.noise import noise_warnings, repeat_spread  # lazy: keeps tidal --help fast

    spread = repeat_spread(samples)
    drift = probe_after / probe_before - 1
    return {
        **load,
        "repeat_spread": spread,
        "probe_drift": drift,
        "warnings": noise_warnings(load, spread, drift),
    }


def warn_noise(noise: dict[str, Any]) -> None:
    """Say that the calibration was noisy, why, and what to do (stderr)."""
    if not noise["warnings"]:
        return
    err_console.print(
        "warning: a noisy calibration: "
        + "; ".join(noise["warnings"])
        + ". Step-time errors of that size come from the machine, not the model: calibrate "
        "again when the machine is quieter (`uptime`), or with more --repeats (medians over "
        "more passes); `tidal fidelity` rescales the profile to the machine's speed around "
        "each run (--recalibrate, on by default)."
    )
