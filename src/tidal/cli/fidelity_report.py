"""Printing a fidelity result (``tidal fidelity``): the per-request error table, then the
diagnostics the result holds (noise floor, recalibrated and speed-normalised profiles, the
scheduler's own CPU time)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.table import Table

from tidal.cli.app import console
from tidal.cli.plain import styled


def print_fidelity(result: dict[str, Any], out: Path) -> None:
    what = "measured run" if result.get("measured") else "real engine"
    t = Table(title=f"simulator vs {what}, per-request |relative error|")
    t.add_column("metric")
    for col in ("median", "p90", "bias (median signed)", "P50 shift", "P90 shift"):
        t.add_column(col, justify="right")
    for m in ("ttft", "tpot", "e2e"):
        t.add_row(
            m.upper(),
            f"{result[f'{m}_median_rel_error']:.1%}",
            f"{result[f'{m}_p90_rel_error']:.1%}",
            f"{result[f'{m}_median_signed_error']:+.1%}",
            f"{result[f'{m}_p50_shift']:+.1%}",
            f"{result[f'{m}_p90_shift']:+.1%}",
        )
    console.print(t)
    floor = result.get("real_vs_real")
    if floor:
        console.print(
            f"noise floor, real run vs real run: TTFT {floor['ttft_median_rel_error']:.1%}, "
            f"TPOT {floor['tpot_median_rel_error']:.1%}, E2E {floor['e2e_median_rel_error']:.1%} "
            f"(median per-request |difference|, {floor['num_pairs']} pairs)"
        )
    vs_mean = result.get("vs_real_mean")
    if vs_mean:
        console.print(
            f"against each request's mean over the real runs: TTFT "
            f"{vs_mean['ttft_median_rel_error']:.1%}, TPOT {vs_mean['tpot_median_rel_error']:.1%}, "
            f"E2E {vs_mean['e2e_median_rel_error']:.1%}"
        )
    recal = result.get("recalibrated")
    if recal:
        raw = result["raw_profile"]
        ratio = ", ".join(f"{r:.3f}" for r in recal["speed_ratio"])
        console.print(
            f"profile rescaled by held-out replays ({recal['held_out_requests']} requests) around "
            f"each run: x{ratio}; the profile as calibrated: TTFT "
            f"{raw['ttft_median_rel_error']:.1%}, TPOT {raw['tpot_median_rel_error']:.1%}, "
            f"E2E {raw['e2e_median_rel_error']:.1%}"
        )
    norm = result.get("speed_normalized")
    if norm:
        ratio = ", ".join(f"{r:.3f}" for r in norm["speed_ratio"])
        console.print(
            f"speed probe vs calibration: x{ratio}; with the profile rescaled by it: TTFT "
            f"{norm['ttft_median_rel_error']:.1%}, TPOT {norm['tpot_median_rel_error']:.1%}, "
            f"E2E {norm['e2e_median_rel_error']:.1%} (median per-request |error|)"
        )
    pc = result.get("prefix_cache")
    if pc and pc["sim_hit_rate"]:
        real = ", ".join(f"{r:.3f}" for r in pc["real_hit_rate"])
        same = ", ".join(f"{r:.0%}" for r in pc["requests_with_equal_cached_tokens"])
        console.print(
            f"prefix cache hit rate (cached / prompt tokens): simulator {pc['sim_hit_rate']:.3f}, "
            f"real {real}; requests with equal cached tokens: {same}"
        )
    hint = noise_hint(result)
    if hint:
        console.print(styled(("note:", "yellow"), " ", hint))
    noisy = noise_warning(result)
    if noisy:
        console.print(styled(("warning:", "yellow"), " ", noisy))
    if not result.get("scheduler_overhead"):  # a measured run: no engine internals
        console.print(f"results in {out}")
        return
    ov = result["scheduler_overhead"][0]
    console.print(
        f"scheduler CPU per step: schedule {ov['schedule_us_per_step']:.0f} µs + update "
        f"{ov['update_us_per_step']:.0f} µs = {ov['scheduler_share_of_step']:.2%} of step time "
        f"({ov['num_steps']} steps); results in {out}"
    )


ROBUST = "--clock cpu --repeats 3 --warmup-requests 40 --recalibrate 40"
"""The flags of BENCHMARKS' final fidelity protocol (issue 6) that ``fidelity`` itself takes."""


def noise_warning(result: dict[str, Any]) -> str | None:
    """The machine's noise during the real runs (``result["noise"]``, measured by
    :func:`tidal.runtime.noise.fidelity_warnings`) and what to do about it; None when quiet."""
    found = (result.get("noise") or {}).get("warnings") or []
    if not found:
        return None
    return (
        "a noisy machine: "
        + "; ".join(found)
        + ". Per-request errors of that size are the machine's, not the simulator's: rerun "
        "when `uptime` shows a quieter machine, or with more --repeats (the line 'against each "
        "request's mean' averages the run-to-run noise out)."
    )


def noise_hint(result: dict[str, Any], tolerance: float = 0.05) -> str | None:
    """What to do when the machine's speed moved between calibration and the real runs.

    The speed probe's time during the runs over its time at calibration is the drift; beyond
    ``tolerance`` (5 %) the profile is off by about as much, per request, before any modelling
    error. Runs already under the robust protocol (CPU clock, held-out recalibration) get none.
    """
    probe = result.get("speed_probe") or {}
    cal, runs = probe.get("calibration_s"), probe.get("runs_s") or []
    if not cal or not runs:
        return None
    robust = result.get("clock") == "cpu" and (result.get("recalibrate") or 0) > 0
    drift = sum(sum(r) / len(r) for r in runs) / len(runs) / cal - 1
    if robust or abs(drift) <= tolerance:
        return None
    return (
        f"this machine ran {abs(drift):.0%} {'slower' if drift > 0 else 'faster'} than at "
        f"calibration (speed probe), so per-request errors of that size are the machine's, "
        f"not the simulator's; on a shared machine rerun with {ROBUST} (and calibrate with "
        "--clock cpu and the workload's --serving-prompt-len/--serving-output-len)"
    )
