"""``tidal hardware show``: step times of one deployment from each performance model, side by
side (plain roofline, corrected roofline, measured profiles where present), and its KV plan."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.table import Table

from tidal.cli import Opt, TidalError, _fail, app, console
from tidal.cli.plain import styled

hardware_app = typer.Typer(help="GPU and model catalog: step-time models and memory plans.")
app.add_typer(hardware_app, name="hardware")

CTX = 1024
SHAPES: tuple[tuple[str, int, int], ...] = (
    ("decode b=1", 1, 0),
    ("decode b=8", 8, 0),
    ("decode b=32", 32, 0),
    ("decode b=128", 128, 0),
    ("decode b=256", 256, 0),
    ("prefill 128", 0, 128),
    ("prefill 512", 0, 512),
    ("prefill 2048", 0, 2048),
    ("mixed b=32 + 512", 32, 512),
)
"""(label, decode requests at a 1024-token context each, prefill tokens in one new chunk)."""


def shape_ms(perf: Any, decodes: int, prefill: int) -> float:
    chunks = 1 if prefill else 0
    return float(
        perf.step_ns(decodes, decodes * CTX, prefill, prefill * prefill, prefill, chunks) / 1e6
    )


def models_for(model: Any, gpu: Any, tp: int) -> dict[str, Any]:
    """The side-by-side models: name → PerfModel (measured only where data exist)."""
    from tidal.hardware.calibration import build_perf_model, measured_model

    out = {
        "roofline": build_perf_model("roofline", model, gpu, tp),
        "corrected-roofline": build_perf_model("corrected-roofline", model, gpu, tp),
    }
    meas = measured_model(model, gpu, tp)
    if meas is not None:
        out["measured"] = meas
    return out


def kv_plan_rows(model: Any, gpu: Any, tp: int) -> list[tuple[str, str]]:
    from tidal.hardware.memory import plan_memory

    try:
        plan = plan_memory(model, gpu, tp)
    except TidalError as err:
        return [("does not fit", str(err))]
    gib = 1024**3
    return [
        ("device memory (driver)", f"{plan.total_bytes / gib:.2f} GiB"),
        ("× gpu_memory_utilization 0.9", f"{plan.requested_bytes / gib:.2f} GiB"),
        ("weights per GPU", f"{plan.weight_bytes_per_gpu / gib:.2f} GiB"),
        (
            f"activation peak ({plan.token_budget} tokens, {plan.max_seqs} seqs)",
            f"{plan.activation_bytes / gib:.2f} GiB",
        ),
        ("non-torch memory", f"{plan.non_torch_bytes / gib:.2f} GiB"),
        ("CUDA graphs", f"{plan.cuda_graph_bytes / gib:.2f} GiB"),
        ("KV cache per GPU", f"{plan.kv_bytes_per_gpu / gib:.2f} GiB"),
        ("KV bytes per token per GPU", f"{plan.kv_bytes_per_token_per_gpu:,.0f}"),
        ("KV blocks", f"{plan.num_blocks:,} × {plan.block_size} tokens"),
        ("kv_capacity_tokens", f"{plan.kv_capacity_tokens:,}"),
    ]


@hardware_app.command("show")
def show(
    gpu: Annotated[str, Opt(help="GPU id, e.g. a100-80gb, h100, h200, a40.")],
    model: Annotated[str, Opt(help="Model id, e.g. llama-2-7b, llama-3.1-8b.")],
    tp: Annotated[int, Opt(help="Tensor-parallel degree.")] = 1,
) -> None:
    """Step times (ms, including LM head and host time) for typical shapes from each model,
    the model ``--perf-model auto`` picks, and the KV plan."""
    from tidal.hardware.calibration import build_perf_model, perf_model_source
    from tidal.hardware.gpus import get_gpu
    from tidal.hardware.models import get_model

    try:
        if tp < 1:
            raise TidalError("--tp: must be ≥ 1")
        m, g = get_model(model), get_gpu(gpu)
        perfs = models_for(m, g, tp)
        auto = build_perf_model("auto", m, g, tp)
    except TidalError as err:
        _fail(err)
        return
    table = Table(title=f"{m.name} on {tp}× {g.name}: step time (ms), context {CTX} per decode")
    table.add_column("shape")
    for name in perfs:
        table.add_column(name, justify="right")
    for label, d, p in SHAPES:
        table.add_row(label, *(f"{shape_ms(perf, d, p):.3f}" for perf in perfs.values()))
    console.print(table)
    console.print(styled("--perf-model auto: ", (perf_model_source(auto), "bold")))
    parts = getattr(perfs.get("measured"), "parts", None)
    if parts:
        for k, v in parts.items():
            console.print(f"  {k}: {v}")
    kv = Table(title="KV plan (hardware/memory.py plan_memory, defaults)")
    kv.add_column("item")
    kv.add_column("value", justify="right")
    for k, v in kv_plan_rows(m, g, tp):
        kv.add_row(k, v)
    console.print(kv)
