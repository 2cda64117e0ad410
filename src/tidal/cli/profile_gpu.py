"""``tidal profile-gpu``: time a model's operators on this GPU (or CPU) and write them as a
``tidal-gpu-profile/1`` file (:mod:`tidal.runtime.opprofiler`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from tidal.cli.app import Opt, TidalError, _fail, app, console
from tidal.hardware.models import get_model

DEVICE_NAMES = (
    ("H200", "h200"),
    ("H100", "h100"),
    ("A100", "a100-80gb"),
    ("L40S", "l40s"),
    ("RTX PRO 6000", "rtx-pro-6000"),
    ("B200", "b200"),
)
"""Substrings of ``torch.cuda.get_device_name`` → catalog GPU names."""


def catalog_gpu(device_name: str) -> str | None:
    """The catalog name of a CUDA device name (``NVIDIA H200`` → ``h200``), or None."""
    up = device_name.upper()
    return next((name for key, name in DEVICE_NAMES if key in up), None)


def _device(spec: str) -> object:
    import torch  # lazy: optional dependency (torch)

    if spec == "auto":
        spec = "cuda" if torch.cuda.is_available() else "cpu"
    dev = torch.device(spec)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise TidalError("device: CUDA is not available here (use --device cpu)")
    return dev


@app.command("profile-gpu")
def profile_gpu(
    out: Annotated[Path, Opt(help="Profile to write (JSON; .gz compresses); merged if present.")],
    model: Annotated[str, Opt(help="Model (catalog id, dense).")] = "llama-3.1-8b",
    tp: Annotated[int, Opt(help="Tensor parallelism: time one rank's shard.")] = 1,
    device: Annotated[str, Opt(help="auto | cuda | cuda:N | cpu.")] = "auto",
    gpu: Annotated[
        str | None, Opt(help="GPU name recorded (default: from the CUDA device; cpu on CPU).")
    ] = None,
    grid: Annotated[
        str | None, Opt(help="full (vidur-like grids) | tiny (default on CPU: tiny shapes).")
    ] = None,
    dtype: Annotated[
        str | None, Opt(help="bfloat16 | float16 | float32 (default: bfloat16 on CUDA).")
    ] = None,
    warmup: Annotated[int, Opt(help="Warm-up runs per operator and shape.")] = 3,
    reps: Annotated[int, Opt(help="Timed runs per operator and shape (median).")] = 10,
    block_size: Annotated[int, Opt(help="KV block size of the paged attention.")] = 16,
    threads: Annotated[int | None, Opt(help="CPU threads for torch.")] = None,
) -> None:
    """Time the layer's GEMMs, norms, RoPE, activation, residual add, the embedding and LM head,
    paged decode and SDPA prefill attention over the profile grids; write tidal-gpu-profile/1."""
    try:
        import torch  # lazy: optional dependency (torch)

        # lazy: keeps tidal --help fast
        from tidal.hardware.opprofile import load_profile, save_profile
        from tidal.runtime import opprofiler as op  # lazy: loads torch, the engine extra

        if threads is not None:
            torch.set_num_threads(threads)
        dev = _device(device)
        assert isinstance(dev, torch.device)
        on_cuda = dev.type == "cuda"
        grid = grid or ("full" if on_cuda else "tiny")
        if grid not in op.GRIDS:
            raise TidalError(f"grid: {grid!r} is not one of {', '.join(op.GRIDS)}")
        dtypes = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
        dtype = dtype or ("bfloat16" if on_cuda else "float32")
        if dtype not in dtypes:
            raise TidalError(f"dtype: {dtype!r} is not one of {', '.join(dtypes)}")
        if warmup < 0 or reps < 1 or tp < 1 or block_size < 1:
            raise TidalError("warmup ≥ 0, reps ≥ 1, tp ≥ 1 and block-size ≥ 1 are required")
        name = gpu or (catalog_gpu(torch.cuda.get_device_name(dev)) if on_cuda else "cpu")
        if name is None:
            raise TidalError(f"gpu: {torch.cuda.get_device_name(dev)!r} is not in the catalog "
                             "(give --gpu NAME)")  # fmt: skip
        timer = op.OpTimer(dev, warmup, reps)
        prof = op.profile_model(
            get_model(model), tp, name, op.GRIDS[grid], timer, dtypes[dtype], block_size
        )
        if out.exists():
            prof = op.merge_profiles(load_profile(out), prof)
        save_profile(prof, out)
    except TidalError as err:
        _fail(err)
    lin = next(x for x in prof.linear if (x.model, x.tp) == (model, tp))
    console.print(f"wrote {out}: {model} tp{tp} on {name} ({prof.notes})")
    for i in sorted({0, len(lin.tokens) // 2, len(lin.tokens) - 1}):
        per_layer = sum(col[i] for col in lin.layer_us.values())
        console.print(f"  {lin.tokens[i]:>6} tokens: {per_layer:10.1f} µs per layer (linear ops)")
