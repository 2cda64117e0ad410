"""``tidal fidelity``: one workload through the real engine and through the simulator (flags and
printing; the comparison itself is :mod:`tidal.experiments.fidelity`).

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

from pathlib import Path
from typing import Annotated

from tidal.cli.app import Opt, TidalError, _fail, _parse_rate, app, console
from tidal.cli.fidelity_report import print_fidelity
from tidal.experiments.fidelity import run_fidelity

__all__ = ["fidelity", "run_fidelity"]


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
            help="A measured run to compare the simulator with, instead of running the real "
            "engine here: `tidal bench serve --result-dir DIR` (any server), or the result "
            "file of vllm bench serve --save-detailed, aiperf (profile_export.jsonl) or "
            "guidellm (benchmarks.json)."
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
    shared_prefix_groups: Annotated[
        int, Opt(help="G shared system prompts (both runs; the real prompts share the tokens).")
    ] = 0,
    shared_prefix_len: Annotated[int, Opt(help="Tokens of each shared system prompt.")] = 0,
    num_kv_blocks: Annotated[
        int | None, Opt(help="KV cache blocks (both runs; default 2048, --measured: the GPU's).")
    ] = None,
    block_size: Annotated[int, Opt(help="Tokens per KV block.")] = 16,
    threads: Annotated[int | None, Opt(help="CPU threads for torch.")] = 1,
    repeats: Annotated[int, Opt(help="Real runs; statistics are their medians.")] = 3,
    seed: Annotated[int, Opt(help="Workload seed.")] = 0,
    device: Annotated[str, Opt(help="auto | cpu | cuda | cuda:N.")] = "auto",
    dtype: Annotated[str, Opt(help="float32 | bfloat16 | float16.")] = "float32",
    clock: Annotated[
        str,
        Opt(
            help="auto (cpu on a CPU device, else wall) | wall | cpu: the engine thread's CPU "
            "time, other tenants skipped (shared machines)."
        ),
    ] = "auto",
    warmup_requests: Annotated[
        int, Opt(help="Replay the workload's first N requests once, unrecorded, first.")
    ] = 40,
    recalibrate: Annotated[
        int,
        Opt(
            help="Before and after each real run, replay N held-out requests (the workload "
            "under another seed) and rescale the profile to the machine's current speed; "
            "0: the profile as calibrated."
        ),
    ] = 40,
) -> None:
    """Replay a workload on the real engine and in the simulator; write per-request errors."""
    try:
        # lazy: checks that the optional extra is installed
        import numpy as np  # noqa: F401

        from tidal.runtime.driver import EngineDriver  # noqa: F401
    except ImportError as err:
        _fail(TidalError(f"{err}; install the engine with: pip install 'tidal[engine]'"))
        return
    try:
        if measured is not None:
            # lazy: keeps tidal --help fast
            from tidal.experiments.fidelity_measured import run_measured_fidelity

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
                "shared_prefix_groups": shared_prefix_groups,
                "shared_prefix_len": shared_prefix_len,
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
            log=console.print,
        )
    except TidalError as err:
        _fail(err)
        return
    print_fidelity(result, out)
