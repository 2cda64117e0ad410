"""``tidal ebplus explain``: the closed-form EB/MB crossover for one setting (EB paper §2.6)."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from rich.table import Table

from tidal.batching import eb_theory as th
from tidal.cli.app import Opt, TidalError, _fail, app, console
from tidal.cli.plain import styled
from tidal.hardware.gpus import get_gpu
from tidal.hardware.interference import step_costs
from tidal.hardware.models import get_model

ebplus_app = typer.Typer(
    help="Exclusive batching (EB) and EB⁺: closed-form thresholds and the EB/MB crossover.",
    no_args_is_help=True,
)
app.add_typer(ebplus_app, name="ebplus")


def explain_setting(
    gpu: str,
    model: str,
    prompt_len: float,
    output_len: float,
    concurrency: int | None = None,
    tp: int = 1,
    perf_model: str = "auto",
    max_seqs: int = 1024,
    gpu_memory_utilization: float = 0.9,
    theta_form: str = "camera",
    perf_host: str = "vllm-v1",
) -> dict[str, Any]:
    """Everything ``explain`` prints, as a dict (also the ``--json`` output).

    N is the concurrency when given (EB⁺ evaluates at N_obs ≈ demand), else the memory-safe
    N̂* capped at ``max_seqs``; θ0 from the CFR closed form with p0 = 1/μ_O; k = θ0·N. The
    crossover uses the simulator's step model (β_MB^e = β_EB^w + ΔI_step) and, where the paper
    measured one, its β_MB^e fit too."""
    # lazy: keeps tidal --help fast
    from tidal.cli.ranges import ExplainArgs, check_args
    from tidal.hardware.calibration import build_perf_model
    from tidal.hardware.corrected import check_host
    from tidal.hardware.memory import plan_memory  # lazy: keeps tidal --help fast

    if prompt_len <= 0 or output_len <= 0:
        raise TidalError("prompt-len/output-len: must be positive token counts")
    check_args(
        ExplainArgs, prompt_len=prompt_len, output_len=output_len, concurrency=concurrency,
        tp=tp, max_seqs=max_seqs,
    )  # fmt: skip
    if concurrency is not None and concurrency > max_seqs:
        raise TidalError(
            f"concurrency: {concurrency} requests in flight, but at most --max-seqs "
            f"{max_seqs} run at once (raise --max-seqs, or give N ≤ {max_seqs})"
        )
    m, g = get_model(model), get_gpu(gpu)
    check_host(perf_host, "perf-host")
    perf = build_perf_model(perf_model, m, g, tp, interference=True, host=perf_host)
    c = step_costs(m, g, tp, perf)
    mem = plan_memory(m, g, tp, gpu_memory_utilization=gpu_memory_utilization, max_seqs=max_seqs)
    p0 = 1.0 / output_len
    theta0 = th.theta_cfr(p0, c.alpha_p, c.alpha_d, exact=theta_form == "exact")
    n_hat = th.memory_safe_n(mem.kv_capacity_tokens, theta0, p0, prompt_len, 0.01, max_seqs)
    n = float(concurrency) if concurrency else float(n_hat)
    fits = {"step": lambda r: c.beta_mb_e(r)}
    if c.mb_cost_fit is not None:
        fits["paper"] = lambda r: c.beta_mb_e(r, paper_fit=True)
    out: dict[str, Any] = {
        "gpu": g.name,
        "model": m.name,
        "tp": tp,
        "prompt_len": prompt_len,
        "output_len": output_len,
        "decode_share": th.decode_share(prompt_len, output_len),
        "costs": {
            "alpha_p": c.alpha_p,
            "beta_p": c.beta_p,
            "alpha_d": c.alpha_d,
            "beta_d": c.beta_d,
            "source": c.source,
        },
        "kv_capacity_tokens": mem.kv_capacity_tokens,
        "theta0": theta0,
        "n_hat": n_hat,
        "n": n,
        "n_source": "concurrency" if concurrency else "memory-safe N̂*",
        "k": theta0 * n,
        "k_exact": th.optimal_k(max(1, int(n)), p0, c.alpha_p, c.alpha_d, c.beta_d),
    }
    for name, f in fits.items():
        args = (prompt_len, output_len, n, theta0, c.alpha_p, c.beta_p, c.alpha_d, c.beta_d, f)
        x = th.crossover(*args)
        xs = th.crossover(*args, mixed_steps=True)
        out[name] = {
            # EB⁺'s default selector (``crossover_lhs: steps``): interference on mixed steps only
            "steps_lhs": xs.lhs,
            "steps_winner": xs.winner,
            "winner": x.winner,
            "margin": x.margin,
            "lhs": x.lhs,
            "rhs": x.rhs,
            "delta": x.delta,
            "c_eb": x.c_eb,
            "c_mb": x.c_mb,
            "threshold_decode_share": th.threshold_decode_share(f, c.beta_d),
            "crossover_n": th.crossover_concurrency(
                prompt_len, output_len, theta0, c.alpha_p, c.beta_p, c.alpha_d, c.beta_d, f
            ),
        }
    main = out["step"]
    out["winner"] = main["winner"]
    out["margin"] = main["margin"]
    out["threshold_decode_share"] = main["threshold_decode_share"]
    return out


def _fmt_share(v: float | None) -> str:
    return "never (MB stays below β_d)" if v is None else f"{v:.3f}"


@ebplus_app.command()
def explain(
    gpu: Annotated[str, Opt(help="GPU id (h200, rtx-pro-6000, l40s, … or NAME@TBs).")],
    model: Annotated[str, Opt(help="Model id, e.g. qwen3-8b.")],
    prompt_len: Annotated[float, Opt(help="Mean prompt length μ_L (tokens).")],
    output_len: Annotated[float, Opt(help="Mean output length μ_O (tokens).")],
    concurrency: Annotated[
        int | None, Opt(help="Requests in flight (N_obs); default: the memory-safe N̂*.")
    ] = None,
    tp: Annotated[int, Opt(help="Tensor-parallel degree.")] = 1,
    perf_model: Annotated[str, Opt(help="auto | roofline | linear.")] = "auto",
    perf_host: Annotated[str, Opt(help="Host time per step: vllm-v1 | vidur.")] = "vllm-v1",
    max_seqs: Annotated[int, Opt(help="Cap on N (vLLM --max-num-seqs).")] = 1024,
    as_json: Annotated[bool, Opt("--json", help="Print the numbers as JSON.")] = False,
) -> None:
    """Which of EB and MB wins for a setting, by how much, and the decode share beyond which
    MB's marginal cost exceeds a pure decode step (closed forms, docs/research/ebplus.md §2)."""
    try:
        args = (gpu, model, prompt_len, output_len, concurrency, tp, perf_model, max_seqs)
        res = explain_setting(*args, perf_host=perf_host)
    except TidalError as err:
        _fail(err)
        return
    if as_json:
        console.print_json(json.dumps(res))
        return


    c = res["costs"]
    console.print(
        styled(
            (f"{res['model']} on {res['tp']}× {res['gpu']}", "bold"),
            f", μ_L = {prompt_len:g}, μ_O = {output_len:g} "
            f"(decode share r = {res['decode_share']:.3f})",
        )
    )
    console.print(
        f"step costs: α_p = {c['alpha_p'] * 1e3:.3f} ms, β_p = {c['beta_p'] * 1e6:.2f} µs/token, "
        f"α_d = {c['alpha_d'] * 1e3:.3f} ms, β_d = {c['beta_d'] * 1e6:.2f} µs/request "
        f"({c['source']})"
    )
    console.print(
        f"θ0 = {res['theta0']:.4f}; N = {res['n']:.0f} ({res['n_source']}; N̂* = {res['n_hat']}); "
        f"k = θ0·N = {res['k']:.1f} (exact finite-N k* = {res['k_exact']})"
    )
    t = Table(title="EB/MB crossover (Prop. 4): EB wins iff LHS > RHS (µs per token)")
    for col in ("β_MB^e", "LHS", "RHS", "Δ", "winner", "margin", "r*", "EB for N ≥"):
        t.add_column(col, justify="right")
    for name in ("step", "paper"):
        if name not in res:
            continue
        x = res[name]
        nx = x["crossover_n"]
        t.add_row(
            name,
            f"{x['lhs'] * 1e6:.2f}",
            f"{x['rhs'] * 1e6:.2f}",
            f"{x['delta'] * 1e6:+.2f}",
            x["winner"].upper(),
            f"{x['margin']:+.1%}",
            _fmt_share(x["threshold_decode_share"]),
            "never" if nx is None else f"{nx:.0f}",
        )
    console.print(t)
    x = res["step"]
    if x["steps_winner"] != x["winner"] or x["steps_lhs"] != x["lhs"]:
        console.print(
            f"EB⁺'s selector counts interference only on steps that mix (at N = {res['n']:.0f}, "
            f"{res['n'] - 1:.0f} decodes beside each prefill): LHS = "
            f"{x['steps_lhs'] * 1e6:.2f} µs/token → {x['steps_winner'].upper()}"
        )
    console.print(
        "β_MB^e: step = β_EB^w + the simulator's step interference; paper = the authors' measured "
        "fit. r* = decode share beyond which MB's marginal cost exceeds a pure decode step."
    )
    console.print(
        styled(
            "→ ",
            (res["winner"].upper(), "bold"),
            f" wins by {res['margin']:.1%} (throughput, from the per-token costs); MB's "
            "marginal cost exceeds a pure decode step beyond a decode share of "
            f"{_fmt_share(res['threshold_decode_share'])}.",
        )
    )
