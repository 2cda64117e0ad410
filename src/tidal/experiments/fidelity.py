"""Fidelity: one workload through the real engine and through the simulator (``tidal fidelity``).

Both runs use the same requests (same seed), the same scheduler and KV cache configuration,
and the same recorder and metric code (:class:`~tidal.sim.recorder.RequestRecorder`,
:func:`~tidal.core.metrics.summarize`); the real run replays arrivals open-loop in wall time
(:func:`tidal.experiments.fidelity_run.real_run`), the simulation uses the calibrated profile as
its step-time model. ``DIR/fidelity.json`` holds the per-request error statistics
(:mod:`tidal.experiments.fidelity_metrics`, medians over ``repeats`` real runs), both runs'
metrics, and the scheduler's own CPU time as a share of step time. Two diagnostics put the errors
in context: ``real_vs_real``, the same statistics between real runs (the measurement's noise
floor), and ``speed_normalized``, the errors once the profile is rescaled by a speed probe measured
before and after each real run (the machine's drift since calibration).

``recalibrate=N`` replays N held-out requests (the same workload under seed + 1, never
compared) before and after every real run and rescales the profile for that run by their
measured / predicted step time (:func:`~tidal.runtime.profiling.speed_ratio`): the headline
errors then use the recalibrated profile and ``raw_profile`` keeps the profile as calibrated.
``warmup_requests=N`` replays the workload's first N requests once, unrecorded, first.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import ValidationError

from tidal.core.clock import CLOCK_CHOICES, resolve_clock
from tidal.core.errors import TidalError
from tidal.core.request import Request
from tidal.experiments.fidelity_run import real_run
from tidal.workload.content import content_token_ids

Log = Callable[[str], None]


def _quiet(_: str) -> None:
    return None


def runtime_config(**kw: Any) -> Any:
    """A ``RuntimeConfig``; pydantic errors become readable ``TidalError``s."""
    # lazy: keeps tidal --help fast
    from tidal.runtime.config import RuntimeConfig
    from tidal.sim.config import format_validation_error

    try:
        return RuntimeConfig(**kw)
    except ValidationError as err:
        raise TidalError(format_validation_error(err)) from None


def _check(repeats: int, warmup_requests: int, recalibrate: int, clock: str) -> None:
    if repeats < 1:
        raise TidalError("repeats: must be >= 1")
    if warmup_requests < 0:
        raise TidalError("warmup-requests: must be >= 0")
    if recalibrate < 0:
        raise TidalError("recalibrate: must be >= 0")
    if clock not in CLOCK_CHOICES:
        raise TidalError(f"clock: unknown {clock!r} (valid: {', '.join(CLOCK_CHOICES)})")


def _load_profile(profile: Path, model: str, clock: str, log: Log) -> Any:
    from tidal.hardware.profiled import ProfiledPerfModel  # lazy: keeps tidal --help fast

    prof = ProfiledPerfModel.load(profile)
    measured_for = prof.info.get("model")
    if measured_for not in (None, model):
        raise TidalError(f"profile: {profile} was measured for {measured_for}, not {model}")
    if prof.info.get("clock", "wall") != clock:
        log(
            f"warning: the profile was timed with the {prof.info.get('clock')} clock, "
            f"this run uses the {clock} clock"
        )
    return prof


def _scaled_profile(prof: Any, ratio: float, path: Path) -> str:
    """Write ``prof`` with every coefficient times ``ratio`` to ``path``; its perf_model key."""
    # lazy: keeps tidal --help fast
    from tidal.core.io import write_json
    from tidal.hardware.profiled import ProfiledPerfModel

    scaled = ProfiledPerfModel(
        {k: v * ratio for k, v in prof.coef.items()}, prof.knots, info=prof.info
    )
    write_json(path, scaled.to_json())
    return f"profile:{path}"


def _held_out_speed(sim_cfg: Any, seed: int, n: int, prof: Any, clock: str) -> Any:
    """A speed probe on a held-out sample of the same workload (another seed, never compared):
    its replay's measured / predicted step time is the machine's speed relative to the profile
    now."""
    from tidal.runtime.profiling import workload_probe  # lazy: loads torch, the engine extra
    from tidal.sim.run import load_requests, rng_streams  # lazy: keeps tidal --help fast

    held_cfg = sim_cfg.model_copy(
        update={
            "seed": seed + 1,
            "workload": sim_cfg.workload.model_copy(update={"num_requests": n}),
        }
    )
    held = load_requests(held_cfg)
    held_rng = rng_streams(seed + 1)["noise"]
    held_reqs = [
        Request(
            i,
            int(held.arrival_ns[i]),
            int(held.prompt_len[i]),
            int(held.output_len[i]),
            token_ids=held_rng.integers(0, 256, int(held.prompt_len[i])).tolist(),
        )
        for i in range(len(held))
    ]

    def speed(rt: Any) -> float:
        return workload_probe(rt, held_reqs, prof, clock)

    return speed


def _recalibrated(
    runs: list[dict[str, Any]], prof: Any, sim_cfg: Any, reqs: Any, out: Path
) -> list[dict[str, Any]]:
    """Per real run: the statistics against a simulation whose profile is rescaled by the mean
    of the held-out speed ratios before and after that run."""
    # lazy: keeps tidal --help fast
    from tidal.experiments.fidelity_metrics import fidelity_summary
    from tidal.sim.run import run_simulation

    out.mkdir(parents=True, exist_ok=True)
    recal: list[dict[str, Any]] = []
    for i, run in enumerate(runs):
        ratio = (run["speed_before"] + run["speed_after"]) / 2
        key = _scaled_profile(prof, ratio, out / f"profile_recalibrated_{i}.json")
        sim_i = run_simulation(sim_cfg.model_copy(update={"perf_model": key}), reqs)
        recal.append(
            {
                **fidelity_summary(run["columns"], sim_i.columns),
                "speed_before": run["speed_before"],
                "speed_after": run["speed_after"],
                "speed_ratio": ratio,
                "sim_metrics": sim_i.metrics,
            }
        )
    return recal


def _medians(summaries: list[dict[str, Any]]) -> dict[str, Any]:
    """The median over runs of every headline statistic (runs without it are skipped)."""
    from tidal.experiments.fidelity_metrics import METRICS  # lazy: keeps tidal --help fast

    keys = [f"{m}_{s}_rel_error" for m in METRICS for s in ("median", "p90")]
    keys += [f"{m}_{s}" for m in METRICS for s in ("median_signed_error", "p50_shift", "p90_shift")]
    return {k: float(np.median([p[k] for p in summaries if p.get(k) is not None])) for k in keys}


def _speed_normalized(
    runs: list[dict[str, Any]], prof: Any, probe_cal: float, sim_cfg: Any, reqs: Any, out: Path
) -> dict[str, Any]:
    """The same profile rescaled by the speed probe's ratio (run time / calibration time):
    what is left of the error once the machine's speed drift is taken out."""
    # lazy: keeps tidal --help fast
    from tidal.experiments.fidelity_metrics import fidelity_summary
    from tidal.sim.run import run_simulation

    normalized = []
    ratios = [r["probe_s"] / probe_cal for r in runs]
    for i, (run, ratio) in enumerate(zip(runs, ratios, strict=True)):
        key = _scaled_profile(prof, ratio, out / f"profile_normalized_{i}.json")
        sim_i = run_simulation(sim_cfg.model_copy(update={"perf_model": key}), reqs)
        normalized.append(fidelity_summary(run["columns"], sim_i.columns))
    return {**_medians(normalized), "speed_ratio": ratios, "per_repeat": normalized}


def _noise(runs: list[dict[str, Any]], sim_columns: Any) -> dict[str, Any]:
    """The measurement's noise floor (the same comparison between two real runs) and the
    comparison with each request's mean over the real runs (the run-to-run noise averages
    out)."""
    # lazy: keeps tidal --help fast
    from tidal.experiments.fidelity_metrics import fidelity_summary, mean_columns

    pairs = [
        fidelity_summary(runs[i]["columns"], runs[j]["columns"])
        for i in range(len(runs))
        for j in range(i + 1, len(runs))
    ]
    mean = mean_columns([r["columns"] for r in runs])
    return {
        "real_vs_real": {**_medians(pairs), "num_pairs": len(pairs)},
        "vs_real_mean": fidelity_summary(mean, sim_columns),
    }


def _sim_config(
    profile: Path,
    model: str,
    workload: dict[str, Any],
    memory: dict[str, Any],
    scheduler: dict[str, Any],
    seed: int,
) -> tuple[Any, Any]:
    """The simulation's config and requests; every request must fit the KV cache."""
    # lazy: keeps tidal --help fast
    from tidal.sim.config import load_config
    from tidal.sim.run import load_requests

    sim_cfg = load_config(
        {
            "model": model,
            "perf_model": f"profile:{profile}",
            "memory": memory,
            "scheduler": scheduler,
            "workload": workload,
            "seed": seed,
        }
    )
    reqs = load_requests(sim_cfg)
    longest = int((reqs.prompt_len + reqs.output_len).max())
    blocks, size = memory["num_blocks"], memory["block_size"]
    if longest > blocks * size:
        raise TidalError(
            f"num_kv_blocks: {blocks} blocks of {size} cannot hold a request of {longest} tokens"
        )
    return sim_cfg, reqs


def run_fidelity(
    profile: Path,
    out: Path,
    *,
    model: str,
    workload: dict[str, Any],
    token_budget: int,
    max_seqs: int,
    num_kv_blocks: int,
    block_size: int,
    threads: int | None,
    repeats: int,
    seed: int,
    device: str = "auto",
    dtype: str = "float32",
    clock: str = "wall",
    warmup_requests: int = 0,
    recalibrate: int = 0,
    batching: str = "mb",
    log: Log = _quiet,
) -> dict[str, Any]:
    """Run the comparison and write ``out/fidelity.json`` and both runs' request tables;
    ``log`` receives progress lines (rich markup). ``clock="auto"`` is ``cpu`` on a CPU device.
    ``noise`` in the result holds the machine's load during the real runs and a sentence for
    every noise source beyond its limit (:func:`tidal.runtime.noise.fidelity_warnings`)."""
    # lazy: keeps tidal --help fast
    from tidal.experiments.fidelity_metrics import fidelity_summary
    from tidal.runtime.config import device_type
    from tidal.runtime.noise import LoadMeter
    from tidal.sim.run import rng_streams, run_simulation

    _check(repeats, warmup_requests, recalibrate, clock)
    clock = resolve_clock(clock, device_type(device))
    prof = _load_profile(profile, model, clock, log)
    watermark = 0.01
    memory = {"block_size": block_size, "watermark": watermark, "num_blocks": num_kv_blocks}
    scheduler = {"token_budget": token_budget, "max_seqs": max_seqs, "batching": batching}
    sim_cfg, reqs = _sim_config(profile, model, workload, memory, scheduler, seed)
    rt_cfg = runtime_config(
        model=model, num_threads=threads, num_kv_blocks=num_kv_blocks, block_size=block_size,
        watermark=watermark, token_budget=token_budget, max_seqs=max_seqs, batching=batching,
        profile=str(profile), seed=seed, device=device, dtype=dtype,
    )  # fmt: skip
    sim = run_simulation(sim_cfg, reqs)
    prompt_rng = rng_streams(seed)["noise"]
    # shared-prefix content (segments) becomes shared token ids; the rest stays random
    prompts = content_token_ids(reqs.content, reqs.prompt_len, prompt_rng, 256)
    speed = _held_out_speed(sim_cfg, seed, recalibrate, prof, clock) if recalibrate else None
    if warmup_requests:
        # The first real run of a process ran slower than the next ones (allocator, caches,
        # the CPU's state after the simulation): a discarded prefix of the workload first.
        k = min(warmup_requests, len(prompts))
        t_warm = time.perf_counter()
        real_run(rt_cfg, reqs.take(np.arange(k)), prompts[:k], sim_cfg, clock, None)
        log(f"  warm-up ({k} requests): {time.perf_counter() - t_warm:.1f} s")
    runs = []
    meter = LoadMeter().start()
    for rep in range(repeats):
        runs.append(real_run(rt_cfg, reqs, prompts, sim_cfg, clock, speed))
        log(f"  real run {rep + 1}/{repeats}: {runs[-1]['wall_s']:.1f} s")
    per_repeat = [fidelity_summary(r["columns"], sim.columns) for r in runs]
    load = meter.read()
    result, per_repeat = _summarize(runs, per_repeat, prof, sim, sim_cfg, reqs, out, recalibrate)
    result["noise"] = _noise_report(load, result, runs)
    result.update(
        {
            "repeats": repeats,
            "per_repeat": per_repeat,
            "real_metrics": [r["metrics"] for r in runs],
            "sim_metrics": sim.metrics,
            "scheduler_overhead": [r["overhead"] for r in runs],
            "profile": str(profile),
            "workload": sim_cfg.workload.model_dump(mode="json"),
            "runtime": rt_cfg.model_dump(mode="json"),
            "seed": seed,
            "clock": clock,
            "warmup_requests": warmup_requests,
            "recalibrate": recalibrate,
            "prefix_cache": prefix_cache_fidelity(sim.columns, [r["columns"] for r in runs]),
        }
    )
    _write(out, result, sim.columns, runs[0]["columns"])
    return result


def prefix_cache_fidelity(sim_columns: Any, real_columns: list[Any]) -> dict[str, Any]:
    """Both backends' prefix-cache hit rates (first-admission cached tokens / prompt tokens,
    from the request tables) and how many requests found exactly the same cached tokens."""
    def rate(cols: Any) -> float:
        return float(np.sum(cols["cached_tokens"]) / max(int(np.sum(cols["prompt_len"])), 1))

    sim_cached = np.asarray(sim_columns["cached_tokens"])
    return {
        "sim_hit_rate": rate(sim_columns),
        "real_hit_rate": [rate(c) for c in real_columns],
        "requests_with_equal_cached_tokens": [
            float(np.mean(np.asarray(c["cached_tokens"]) == sim_cached)) for c in real_columns
        ],
    }


def _summarize(
    runs: list[dict[str, Any]],
    per_repeat: list[dict[str, Any]],
    prof: Any,
    sim: Any,
    sim_cfg: Any,
    reqs: Any,
    out: Path,
    recalibrate: int,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The headline medians (of the recalibrated profile when ``recalibrate``) and the
    diagnostics: ``raw_profile``, ``speed_normalized``, ``real_vs_real``, ``speed_probe``; and
    the per-run statistics the medians are of."""
    recal: list[dict[str, Any]] = []
    raw_per_repeat = per_repeat
    if recalibrate:
        recal = _recalibrated(runs, prof, sim_cfg, reqs, out)
        per_repeat = [{k: v for k, v in r.items() if k not in ("sim_metrics",)} for r in recal]
    result: dict[str, Any] = _medians(per_repeat)
    out.mkdir(parents=True, exist_ok=True)
    if recalibrate:
        # The headline errors above use the profile rescaled by the held-out replays around
        # each run; these are the same statistics for the profile as calibrated.
        result["recalibrated"] = {
            "held_out_requests": recalibrate,
            "speed_ratio": [r["speed_ratio"] for r in recal],
            "sim_metrics": [r["sim_metrics"] for r in recal],
        }
        result["raw_profile"] = {**_medians(raw_per_repeat), "per_repeat": raw_per_repeat}
    probe_cal = prof.info.get("probe_s")
    if probe_cal:
        result["speed_normalized"] = _speed_normalized(runs, prof, probe_cal, sim_cfg, reqs, out)
    if len(runs) > 1:
        result.update(_noise(runs, sim.columns))
    result["speed_probe"] = {
        "calibration_s": probe_cal,
        "runs_s": [[r["probe_before_s"], r["probe_after_s"]] for r in runs],
    }
    return result, per_repeat


def _noise_report(
    load: dict[str, Any], result: dict[str, Any], runs: list[dict[str, Any]]
) -> dict[str, Any]:
    from tidal.runtime.noise import fidelity_warnings  # lazy: keeps tidal --help fast

    pairs = [(r["speed_before"], r["speed_after"]) for r in runs if r["speed_before"]]
    return {**load, "warnings": fidelity_warnings(load, result.get("real_vs_real"), pairs)}


def _write(out: Path, result: dict[str, Any], sim_columns: Any, real_columns: Any) -> None:
    # lazy: keeps tidal --help fast
    from tidal.core.io import write_json, write_parquet
    from tidal.experiments.results import _clean

    write_json(out / "fidelity.json", _clean(result))
    write_parquet(out / "sim_requests.parquet", sim_columns)
    write_parquet(out / "real_requests.parquet", real_columns)
