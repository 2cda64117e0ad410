"""``tidal fidelity``: one workload through the real engine and through the simulator.

Both runs use the same requests (same seed), the same scheduler and KV cache configuration,
and the same recorder and metric code (:class:`~tidal.sim.recorder.RequestRecorder`,
:func:`~tidal.core.metrics.summarize`); the real run replays arrivals open-loop in wall time,
the simulation uses the calibrated profile as its step-time model. ``DIR/fidelity.json`` holds
the per-request error statistics (:mod:`tidal.report.fidelity`, medians over ``--repeats`` real
runs), both runs' metrics, and the scheduler's own CPU time as a share of step time. Two
diagnostics put the errors in context: ``real_vs_real``, the same statistics between real runs
(the measurement's noise floor), and ``speed_normalized``, the errors once the profile is
rescaled by a speed probe measured before and after each real run (the machine's drift since
calibration).

``--recalibrate N`` replays N held-out requests (the same workload under seed + 1, never
compared) before and after every real run and rescales the profile for that run by their
measured / predicted step time (:func:`~tidal.runtime.profiling.speed_ratio`): the headline
errors then use the recalibrated profile and ``raw_profile`` keeps the profile as calibrated.
``--warmup-requests N`` replays the workload's first N requests once, unrecorded, first.
``--measured DIR`` compares with a run measured elsewhere instead (:mod:`.fidelity_measured`).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

from tidal.cli import Opt, TidalError, _fail, _parse_rate, app, console
from tidal.cli.fidelity_report import print_fidelity
from tidal.core.clock import CLOCKS


@app.command()
def fidelity(
    out: Annotated[Path, Opt(help="Output directory (fidelity.json, requests parquet files).")],
    profile: Annotated[
        Path | None,
        Opt(help="Step-time profile from `tidal calibrate` (needed unless --measured --gpu)."),
    ] = None,
    measured: Annotated[
        Path | None,
        Opt(
            help="A measured run (`tidal bench serve --result-dir DIR`, any server) to compare "
            "the simulator with, instead of running the real engine here."
        ),
    ] = None,
    gpu: Annotated[str | None, Opt(help="--measured: the GPU it ran on (h100, h200, ...).")] = None,
    tp: Annotated[
        int | None, Opt("--tp", "--tensor-parallel-size", "-tp", help="--measured: TP degree.")
    ] = None,
    gpu_memory_utilization: Annotated[
        float | None, Opt(help="--measured: share of GPU memory for weights and KV.")
    ] = None,
    num_requests: Annotated[int, Opt(help="Requests in the workload.")] = 200,
    rate: Annotated[str, Opt(help="Arrival rate in req/s.")] = "10",
    model: Annotated[str, Opt(help="Model (catalog id); must match the profile.")] = "tiny-llama",
    arrival_cv: Annotated[float, Opt(help="Inter-arrival CV: 1 Poisson, else Gamma.")] = 1.0,
    prompt_len: Annotated[int, Opt(help="Prompt length (location of length-dist).")] = 128,
    output_len: Annotated[int, Opt(help="Output length (location of length-dist).")] = 64,
    length_dist: Annotated[str, Opt(help="fixed | uniform | geometric | lognormal | ...")] = (
        "uniform"
    ),
    token_budget: Annotated[
        int, Opt("--token-budget", "--max-num-batched-tokens", help="Max tokens per step (B).")
    ] = 512,
    max_seqs: Annotated[
        int, Opt("--max-seqs", "--max-num-seqs", help="Max running requests (N).")
    ] = 64,
    batching: Annotated[
        str, Opt(help="Batching policy of both runs: mb | eb | ebplus (EB costs: the profile's).")
    ] = "mb",
    num_kv_blocks: Annotated[
        int | None, Opt(help="KV cache blocks (both runs; default 2048, --measured: the GPU's).")
    ] = None,
    block_size: Annotated[int, Opt(help="Tokens per KV block.")] = 16,
    threads: Annotated[int | None, Opt(help="CPU threads for torch.")] = 1,
    repeats: Annotated[int, Opt(help="Real runs; statistics are their medians.")] = 1,
    seed: Annotated[int, Opt(help="Workload seed.")] = 0,
    device: Annotated[str, Opt(help="auto | cpu | cuda | cuda:N.")] = "auto",
    dtype: Annotated[str, Opt(help="float32 | bfloat16 | float16.")] = "float32",
    clock: Annotated[
        str, Opt(help="wall, or cpu: the engine thread's CPU time (shared machines).")
    ] = "wall",
    warmup_requests: Annotated[
        int, Opt(help="Replay the workload's first N requests once, unrecorded, first.")
    ] = 0,
    recalibrate: Annotated[
        int,
        Opt(
            help="Before and after each real run, replay N held-out requests (the workload "
            "under another seed) and rescale the profile to the machine's current speed; "
            "0: the profile as calibrated."
        ),
    ] = 0,
) -> None:
    """Replay a workload on the real engine and in the simulator; write per-request errors."""
    try:
        import numpy as np  # noqa: F401

        from tidal.runtime.driver import EngineDriver  # noqa: F401
    except ImportError as err:
        _fail(TidalError(f"{err}; install the engine with: pip install 'tidal[engine]'"))
        return
    try:
        if measured is not None:
            from tidal.cli.fidelity_measured import run_measured_fidelity

            result = run_measured_fidelity(
                measured, out, model=model, gpu=gpu, tp=tp, profile=profile,
                token_budget=token_budget, max_seqs=max_seqs, batching=batching,
                num_kv_blocks=num_kv_blocks, block_size=block_size,
                gpu_memory_utilization=gpu_memory_utilization, seed=seed,
            )  # fmt: skip
            print_fidelity(result, out)
            return
        if profile is None:
            raise TidalError("profile: give --profile PROFILE.json (tidal calibrate)")
        result = run_fidelity(
            profile,
            out,
            model=model,
            workload={
                "num_requests": num_requests,
                "rate": _parse_rate(rate),
                "arrival_cv": arrival_cv,
                "prompt_len": prompt_len,
                "output_len": output_len,
                "length_dist": length_dist,
            },
            token_budget=token_budget,
            max_seqs=max_seqs,
            batching=batching,
            num_kv_blocks=num_kv_blocks or 2048,
            block_size=block_size,
            threads=threads,
            repeats=repeats,
            seed=seed,
            device=device,
            dtype=dtype,
            clock=clock,
            warmup_requests=warmup_requests,
            recalibrate=recalibrate,
        )
    except TidalError as err:
        _fail(err)
        return
    print_fidelity(result, out)


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
) -> dict[str, Any]:
    import numpy as np

    from tidal.cli.calibrate import runtime_config
    from tidal.hardware.profiled import ProfiledPerfModel
    from tidal.report.fidelity import METRICS, fidelity_summary, mean_columns
    from tidal.report.io import write_json, write_parquet
    from tidal.report.results import _clean
    from tidal.sim.config import load_config
    from tidal.sim.run import load_requests, rng_streams, run_simulation

    if repeats < 1:
        raise TidalError("repeats: must be >= 1")
    if warmup_requests < 0:
        raise TidalError("warmup-requests: must be >= 0")
    if recalibrate < 0:
        raise TidalError("recalibrate: must be >= 0")
    if clock not in CLOCKS:
        raise TidalError(f"clock: unknown {clock!r} (valid: {', '.join(CLOCKS)})")
    prof = ProfiledPerfModel.load(profile)
    measured_for = prof.info.get("model")
    if measured_for not in (None, model):
        raise TidalError(f"profile: {profile} was measured for {measured_for}, not {model}")
    if prof.info.get("clock", "wall") != clock:
        console.print(
            f"[yellow]warning:[/] the profile was timed with the {prof.info.get('clock')} clock, "
            f"this run uses the {clock} clock"
        )
    watermark = 0.01
    sim_cfg = load_config(
        {
            "model": model,
            "perf_model": f"profile:{profile}",
            "memory": {
                "block_size": block_size,
                "watermark": watermark,
                "num_blocks": num_kv_blocks,
            },
            "scheduler": {
                "token_budget": token_budget,
                "max_seqs": max_seqs,
                "batching": batching,
            },
            "workload": workload,
            "seed": seed,
        }
    )
    reqs = load_requests(sim_cfg)
    longest = int((reqs.prompt_len + reqs.output_len).max())
    if longest > num_kv_blocks * block_size:
        raise TidalError(
            f"num_kv_blocks: {num_kv_blocks} blocks of {block_size} cannot hold a request of "
            f"{longest} tokens"
        )
    rt_cfg = runtime_config(
        model=model,
        num_threads=threads,
        num_kv_blocks=num_kv_blocks,
        block_size=block_size,
        watermark=watermark,
        token_budget=token_budget,
        max_seqs=max_seqs,
        batching=batching,
        profile=str(profile),
        seed=seed,
        device=device,
        dtype=dtype,
    )
    sim = run_simulation(sim_cfg, reqs)
    prompt_rng = rng_streams(seed)["noise"]
    prompts = [prompt_rng.integers(0, 256, int(p)).tolist() for p in reqs.prompt_len]
    speed = None
    if recalibrate:
        # A held-out sample of the same workload (another seed, never compared): its replay's
        # measured / predicted step time is the machine's speed relative to the profile now.
        from tidal.core.request import Request
        from tidal.runtime.profiling import workload_probe

        held_cfg = sim_cfg.model_copy(
            update={
                "seed": seed + 1,
                "workload": sim_cfg.workload.model_copy(update={"num_requests": recalibrate}),
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

    if warmup_requests:
        # The first real run of a process ran slower than the next ones (allocator, caches,
        # the CPU's state after the simulation): a discarded prefix of the workload first.
        k = min(warmup_requests, len(prompts))
        t_warm = time.perf_counter()
        _real_run(rt_cfg, reqs.take(np.arange(k)), prompts[:k], sim_cfg, clock, None)
        console.print(f"  warm-up ({k} requests): {time.perf_counter() - t_warm:.1f} s")
    runs = []
    for rep in range(repeats):
        runs.append(_real_run(rt_cfg, reqs, prompts, sim_cfg, clock, speed))
        console.print(f"  real run {rep + 1}/{repeats}: {runs[-1]['wall_s']:.1f} s")
    per_repeat = [fidelity_summary(r["columns"], sim.columns) for r in runs]
    recal: list[dict[str, Any]] = []
    if recalibrate:
        out.mkdir(parents=True, exist_ok=True)
        for i, run in enumerate(runs):
            ratio = (run["speed_before"] + run["speed_after"]) / 2
            scaled = ProfiledPerfModel(
                {k: v * ratio for k, v in prof.coef.items()}, prof.knots, info=prof.info
            )
            path = out / f"profile_recalibrated_{i}.json"
            write_json(path, scaled.to_json())
            sim_i = run_simulation(
                sim_cfg.model_copy(update={"perf_model": f"profile:{path}"}), reqs
            )
            recal.append(
                {
                    **fidelity_summary(run["columns"], sim_i.columns),
                    "speed_before": run["speed_before"],
                    "speed_after": run["speed_after"],
                    "speed_ratio": ratio,
                    "sim_metrics": sim_i.metrics,
                }
            )
        raw_per_repeat = per_repeat
        per_repeat = [{k: v for k, v in r.items() if k not in ("sim_metrics",)} for r in recal]
    keys = [f"{m}_{s}_rel_error" for m in METRICS for s in ("median", "p90")]
    keys += [f"{m}_{s}" for m in METRICS for s in ("median_signed_error", "p50_shift", "p90_shift")]

    def medians(summaries: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            k: float(np.median([p[k] for p in summaries if p.get(k) is not None])) for k in keys
        }

    result: dict[str, Any] = medians(per_repeat)
    out.mkdir(parents=True, exist_ok=True)
    if recalibrate:
        # The headline errors above use the profile rescaled by the held-out replays around
        # each run; these are the same statistics for the profile as calibrated.
        result["recalibrated"] = {
            "held_out_requests": recalibrate,
            "speed_ratio": [r["speed_ratio"] for r in recal],
            "sim_metrics": [r["sim_metrics"] for r in recal],
        }
        result["raw_profile"] = {**medians(raw_per_repeat), "per_repeat": raw_per_repeat}
    probe_cal = prof.info.get("probe_s")
    if probe_cal:
        # The same profile rescaled by the speed probe's ratio (run time / calibration time):
        # what is left of the error once the machine's speed drift is taken out.
        normalized = []
        ratios = [r["probe_s"] / probe_cal for r in runs]
        for i, (run, ratio) in enumerate(zip(runs, ratios, strict=True)):
            scaled = ProfiledPerfModel(
                {k: v * ratio for k, v in prof.coef.items()}, prof.knots, info=prof.info
            )
            path = out / f"profile_normalized_{i}.json"
            write_json(path, scaled.to_json())
            cfg_i = sim_cfg.model_copy(update={"perf_model": f"profile:{path}"})
            sim_i = run_simulation(cfg_i, reqs)
            normalized.append(fidelity_summary(run["columns"], sim_i.columns))
        result["speed_normalized"] = {
            **medians(normalized),
            "speed_ratio": ratios,
            "per_repeat": normalized,
        }
    if len(runs) > 1:
        # The measurement's noise floor: the same comparison between two real runs.
        pairs = [
            fidelity_summary(runs[i]["columns"], runs[j]["columns"])
            for i in range(len(runs))
            for j in range(i + 1, len(runs))
        ]
        result["real_vs_real"] = {**medians(pairs), "num_pairs": len(pairs)}
        # Against each request's mean over the real runs: the run-to-run noise averages out.
        mean = mean_columns([r["columns"] for r in runs])
        result["vs_real_mean"] = fidelity_summary(mean, sim.columns)
    result["speed_probe"] = {
        "calibration_s": probe_cal,
        "runs_s": [[r["probe_before_s"], r["probe_after_s"]] for r in runs],
    }
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
        }
    )
    write_json(out / "fidelity.json", _clean(result))
    write_parquet(out / "sim_requests.parquet", sim.columns)
    write_parquet(out / "real_requests.parquet", runs[0]["columns"])
    return result


def _real_run(
    rt_cfg: Any,
    reqs: Any,
    prompts: list[list[int]],
    sim_cfg: Any,
    clock: str,
    speed: Any = None,
) -> dict[str, Any]:
    from tidal.core.histogram import LogHistogram
    from tidal.core.metrics import summarize
    from tidal.core.request import Request
    from tidal.runtime.config import build_engine
    from tidal.runtime.driver import EngineDriver
    from tidal.runtime.profiling import probe, warm_up
    from tidal.sim.recorder import RequestRecorder

    rt = build_engine(rt_cfg)
    driver = EngineDriver(rt)
    warm_up(rt, clock)
    probe_before = probe(rt, clock)
    speed_before = speed(rt) if speed is not None else None
    eng = rt.engine
    eng.schedule_ns = eng.execute_ns = eng.update_ns = 0
    recorder = RequestRecorder(reqs)
    arrivals = reqs.arrival_ns.tolist()
    outputs = reqs.output_len.tolist()
    requests = [
        Request(i, arrivals[i], len(p), outputs[i], token_ids=list(p))
        for i, p in enumerate(prompts)
    ]
    steps: list = []
    t0 = time.perf_counter()
    driver.replay(requests, recorder.on_finish, steps=steps, clock=clock)
    wall = time.perf_counter() - t0
    speed_after = speed(rt) if speed is not None else None
    probe_after = probe(rt, clock)
    import numpy as np

    periods = np.array([r.period_ns for r in steps], dtype=np.int64)
    itl = LogHistogram()  # a step's duration, weighted by its decode tokens (as the simulator)
    for r in steps:
        if r.shape.num_decodes:
            itl.add(r.period_ns, r.shape.num_decodes)
    cols = recorder.columns()
    slo = sim_cfg.slo
    metrics = summarize(cols, slo.ttft_s, slo.tpot_s, itl)
    # the policy's own counters (EB⁺: mode switches, time in EB), warm-up and probes included
    for k, v in rt.scheduler.extra_metrics().items():
        metrics.setdefault(k, v)
    n = max(len(steps), 1)
    step_ns = eng.schedule_ns + eng.execute_ns + eng.update_ns
    overhead = {
        "num_steps": len(steps),
        "schedule_us_per_step": eng.schedule_ns / n / 1e3,
        "update_us_per_step": eng.update_ns / n / 1e3,
        "execute_us_per_step": eng.execute_ns / n / 1e3,
        "step_period_us_mean": float(periods.mean() / 1e3) if len(periods) else 0.0,
        "scheduler_share_of_step": (eng.schedule_ns + eng.update_ns) / max(step_ns, 1),
    }
    return {
        "columns": cols,
        "metrics": metrics,
        "overhead": overhead,
        "wall_s": wall,
        "probe_s": (probe_before + probe_after) / 2,
        "probe_before_s": probe_before,
        "probe_after_s": probe_after,
        "speed_before": speed_before,
        "speed_after": speed_after,
    }
