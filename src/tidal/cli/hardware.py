"""``tidal hardware show``: step times of one deployment from each performance model, side by
side (plain roofline, corrected roofline, Vidur's measured profiles and the serving engines'
measured tables where present), the engine versions with tables, and its KV plan."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.table import Table

from tidal.cli.app import Opt, TidalError, _fail, app, console
from tidal.cli.plain import styled
from tidal.hardware.gpus import GPUS, get_gpu
from tidal.hardware.models import MODELS, get_model

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
    # lazy: keeps tidal --help fast
    from tidal.hardware.calibration import build_perf_model, measured_model

    out = {
        "roofline": build_perf_model("roofline", model, gpu, tp),
        "corrected-roofline": build_perf_model("corrected-roofline", model, gpu, tp),
    }
    meas = measured_model(model, gpu, tp)
    if meas is not None:
        out["measured"] = meas
    out.update(engine_models(model, gpu, tp))
    return out


def engine_models(model: Any, gpu: Any, tp: int) -> dict[str, Any]:
    """``engine:<engine>`` → the engine-table model at its newest version, where the GPU's
    tables (and the model's shapes) allow one."""
    # lazy: keeps tidal --help fast
    from tidal.hardware.engine_data import ENGINES
    from tidal.hardware.engine_perf import EnginePerfModel, system_of

    if system_of(gpu) is None:
        return {}
    out: dict[str, Any] = {}
    for eng in ENGINES:
        try:
            out[f"engine:{eng}"] = EnginePerfModel(model, gpu, tp, eng)
        except TidalError:
            continue
    return out


def engine_version_rows(gpu: Any) -> list[tuple[str, str]]:
    """(engine, its versions with measured tables on ``gpu``), oldest first."""
    # lazy: keeps tidal --help fast
    from tidal.hardware.engine_data import ENGINES, engine_versions
    from tidal.hardware.engine_perf import system_of

    system = system_of(gpu)
    if system is None:
        return []
    return [(e, " ".join(v)) for e in ENGINES if (v := engine_versions(system, e))]


def kv_plan_rows(model: Any, gpu: Any, tp: int) -> list[tuple[str, str]]:
    from tidal.hardware.memory import plan_memory  # lazy: keeps tidal --help fast

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
        *(
            [(f"window KV / linear state ({plan.max_seqs} seqs)", f"{seq / gib:.2f} GiB")]
            if (seq := plan.seq_state_bytes)
            else []
        ),
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
    quantization: Annotated[
        str | None, Opt(help="vLLM --quantization (fp8, modelopt_fp4, mxfp4, …).")
    ] = None,
    kv_cache_dtype: Annotated[str | None, Opt(help="vLLM --kv-cache-dtype (auto, fp8).")] = None,
) -> None:
    """Step times (ms, including LM head and host time) for typical shapes from each model,
    the model ``--perf-model auto`` picks, and the KV plan."""
    # lazy: keeps tidal --help fast
    from tidal.hardware.calibration import build_perf_model, perf_model_source

    try:
        if tp < 1:
            raise TidalError("--tp: must be ≥ 1")
        m = get_model(model, quantization=quantization, kv_cache_dtype=kv_cache_dtype)
        g = get_gpu(gpu)
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
    for eng, vers in engine_version_rows(g) or [("engines", "no measured tables (A40)")]:
        console.print(f"--engine {eng}: tables of versions {vers}")
    console.print(
        f"weights {m.gemm_quant} (experts {m.moe_quant}), KV cache {m.kv_cache_dtype}"
        + (f", {m.architecture}" if m.architecture else "")
    )
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



DATA_NOTE = "step-time data (--perf-model auto; anything not listed: corrected roofline)"


def _backing_lines(title: str, rows: dict[str, Any]) -> Table:
    """One line per catalog entry: what data backs its step times (wraps at any width)."""
    t = Table.grid(padding=(0, 2))
    t.add_column(no_wrap=True)
    t.add_column()
    for name, b in rows.items():
        t.add_row(name, b.describe())
    t.title = title
    t.title_justify = "left"
    return t


def gpu_tables() -> list[Table]:
    from tidal.hardware.catalog import backing  # lazy: keeps tidal --help fast

    by_gpu, _ = backing()
    t = Table(title="GPUs (--gpu; NAME@TBs for a what-if memory bandwidth)")
    for col in ("gpu", "bf16 TFLOP/s", "HBM TB/s", "GiB", "peer GB/s", "$/h"):
        t.add_column(col, justify="left" if col == "gpu" else "right")
    for name, g in GPUS.items():
        link = f"{g.nvlink_gbs:g} NVLink" if g.nvlink_gbs else f"{g.pcie_gbs:g} PCIe"
        gib = g.mem_bytes / 1024**3
        t.add_row(
            name, f"{g.bf16_tflops:g}", f"{g.mem_bw_tbs:g}", f"{gib:.2f}", link,
            f"{g.price_per_hour:g}",
        )  # fmt: skip
    return [t, _backing_lines(f"GPUs: {DATA_NOTE}", by_gpu), engine_table_lines()]


def engine_table_lines() -> Table:
    """Per GPU, the serving engines and versions whose measured operator tables
    ``--perf-model engine`` reads (``--engine``, ``--engine-version``)."""
    t = Table.grid(padding=(0, 2))
    t.add_column(no_wrap=True)
    t.add_column()
    for name, g in GPUS.items():
        rows = engine_version_rows(g)
        t.add_row(name, "; ".join(f"{e} {v}" for e, v in rows) or "no tables (corrected roofline)")
    t.title = ("GPUs: engines and versions with measured operator tables (--perf-model engine "
               "and auto)")
    t.title_justify = "left"
    return t


def model_tables() -> list[Table]:
    from tidal.hardware.catalog import backing  # lazy: keeps tidal --help fast

    _, by_model = backing()
    t = Table(title="Models (--model)")
    for col in ("model", "params B", "layers", "heads q/kv", "max context", "KV KiB/tok"):
        t.add_column(col, justify="left" if col == "model" else "right")
    for name, m in MODELS.items():
        t.add_row(
            name, f"{m.num_params / 1e9:.2f}", str(m.num_layers),
            f"{m.num_heads}/{m.num_kv_heads}", f"{m.max_context:,}",
            f"{m.kv_bytes_per_token / 1024:g}",
        )  # fmt: skip
    return [t, _backing_lines(f"Models: {DATA_NOTE}", by_model)]


def _print(tables: list[Table]) -> None:
    for t in tables:
        console.print(t)
        console.print()


@app.command("gpus")
def gpus() -> None:
    """The GPU catalog: spec-sheet numbers and the measured data behind each GPU's step times."""
    _print(gpu_tables())


@app.command("models")
def models() -> None:
    """The model catalog: shapes and the measured data behind each model's step times."""
    _print(model_tables())


@hardware_app.command("list")
def list_catalog() -> None:
    """Both catalogs (``tidal gpus`` and ``tidal models``)."""
    _print(gpu_tables() + model_tables())
