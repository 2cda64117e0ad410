"""Per-GPU timeline of a cluster run: which model's weights (warm/loading replicas or a
running instance) and KV cache occupy each GPU over time, as stacked step areas (one row per
GPU, one colour per model; hatched = prewarmed replica, solid = serving weights, light = KV)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from tidal.cluster.memory import KINDS
from tidal.core.io import atomic_write

_STYLE: dict[str, dict[str, Any]] = {
    "prewarm": {"alpha": 0.45, "hatch": "///"},
    "weights": {"alpha": 0.95},
    "kv": {"alpha": 0.25},
}


def gpu_series(
    log: dict[str, np.ndarray], gpu: int, num_models: int
) -> tuple[np.ndarray, np.ndarray]:
    """(times in s, pages[time, model·kind]) step series of one GPU from the memory log."""
    sel = log["gpu"] == gpu
    t = log["time_ns"][sel]
    model, kind, pages = log["model"][sel], log["kind"][sel], log["pages"][sel]
    n_k = len(KINDS)
    cur = np.zeros(num_models * n_k)
    times, rows = [0.0], [cur.copy()]
    for i in range(len(t)):
        cur[model[i] * n_k + kind[i]] = pages[i]
        times.append(t[i] / 1e9)
        rows.append(cur.copy())
    return np.asarray(times), np.asarray(rows)


def plot_gpu_timeline(result: Any, path: str | Path, t0_s: float | None = None) -> Path:
    import matplotlib  # lazy: optional dependency (matplotlib)

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # lazy: optional dependency (matplotlib)

    ctl = result.extras["controller"]
    log = result.extras["tables"]["gpu_memory"]
    names = [m.name for m in ctl.models]
    n_gpu = ctl.topo.num_gpus
    n_k = len(KINDS)
    colors = [plt.get_cmap("tab10")(i) for i in range(10)]
    fig, axes = plt.subplots(n_gpu, 1, figsize=(12, 0.55 * n_gpu + 1.2), sharex=True)
    axes = np.atleast_1d(axes)
    end = float(log["time_ns"].max()) / 1e9 if len(log["time_ns"]) else 1.0
    gib = ctl.pages_per_gpu * ctl.page_bytes / 2**30
    for g in range(n_gpu):
        ax = axes[g]
        times, rows = gpu_series(log, g, len(names))
        times = np.append(times, end)
        rows = np.vstack([rows, rows[-1:]])
        base = np.zeros(len(times))
        for m in range(len(names)):
            for k, kind in enumerate(KINDS):
                y = rows[:, m * n_k + k] / ctl.pages_per_gpu
                if not y.any():
                    continue
                style = _STYLE[kind]
                ax.fill_between(
                    times, base, base + y, step="post", color=colors[m % 10], linewidth=0, **style
                )
                base = base + y
        ax.set_ylim(0, 1)
        ax.yaxis.tick_right()  # each row's scale: 0 to the GPU's planned memory
        ax.set_yticks([0, 1], ["0", f"{gib:.0f} GiB"], fontsize=6)
        ax.set_ylabel(f"GPU {g}", rotation=0, ha="right", va="center", fontsize=7)
        if t0_s is not None:
            ax.axvline(t0_s, color="k", linewidth=0.5)
    from matplotlib.patches import Patch  # lazy: optional dependency (matplotlib)

    handles = [Patch(color=colors[m % 10], label=n) for m, n in enumerate(names)]
    handles += [
        Patch(facecolor="grey", alpha=0.45, hatch="///", label="prewarmed"),
        Patch(facecolor="grey", alpha=0.95, label="serving weights"),
        Patch(facecolor="grey", alpha=0.25, label="KV cache"),
    ]
    axes[0].legend(
        handles=handles, ncol=len(handles), fontsize=7, loc="lower left", bbox_to_anchor=(0, 1.05)
    )
    axes[-1].set_xlabel("time (s)")
    fig.suptitle(
        f"{ctl.cfg.placement} on {ctl.cfg.spec}: GPU memory by model (each row one GPU, 0 to "
        f"{gib:.0f} GiB planned)",
        y=0.995,
    )
    fig.tight_layout()
    out = Path(path)
    atomic_write(out, lambda p: fig.savefig(p, dpi=110, format="png"))
    plt.close(fig)
    return out
