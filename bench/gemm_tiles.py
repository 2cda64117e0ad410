"""GEMM efficiency variants of the corrected roofline, fitted on every measured GEMM row.

    python bench/gemm_tiles.py

Variants of the compute term's row count M' in ``2·N·K·(M' + M_½)/(η_F·F)``: ``none`` (M' = M),
``m64``/``m128`` (⌈M/t⌉·t: whole tiles in M), ``wave128`` (⌈⌈M/128⌉·⌈N/128⌉ / SMs⌉ waves of
128×128 tiles), ``wave128-full`` (waves counted only past one full wave). Same loss as
``roofline_fit.fit_gemm`` (log residuals, soft-L1). Prints |error| median, p95 and worst over
all rows and over 64–512 tokens, and the worst rows. A screening fit on all data (not held
out); ``bench/step_accuracy.py --m-tile`` holds the chosen variant out.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import least_squares

from tidal.hardware.corrected import layer_gemms, ridge_tokens
from tidal.hardware.gpus import get_gpu
from tidal.hardware.models import get_model
from tidal.hardware.opprofile import bundled_profiles

SMS = {"a100-80gb": 108, "h100": 132, "a40": 84}
"""Streaming multiprocessors (NVIDIA data sheets: A100 SXM 108, H100 SXM 132, A40 84)."""


def rows() -> tuple[dict[str, np.ndarray], list[str], list[str]]:
    gpus = sorted({p.gpu for p in bundled_profiles()})
    cols: dict[str, list[float]] = {k: [] for k in ("g", "m", "k", "n", "t")}
    names = []
    for p in bundled_profiles():
        for x in p.linear:
            for op, k, n in layer_gemms(get_model(x.model), x.tp):
                for m, t in zip(x.tokens, x.layer_us[op], strict=True):
                    if t > 0:
                        for key, v in zip(cols, (gpus.index(p.gpu), m, k, n, t * 1e-6),
                                          strict=True):  # fmt: skip
                            cols[key].append(float(v))
                        names.append(f"{p.gpu}/{x.model}/tp{x.tp}/{op} M={m}")
    return {k: np.asarray(v) for k, v in cols.items()}, gpus, names


def rows_m(d: dict[str, np.ndarray], sms: np.ndarray, variant: str) -> np.ndarray:
    m, n = d["m"], d["n"]
    if variant.startswith("m"):
        t = int(variant[1:])
        return np.ceil(m / t) * t
    if variant.startswith("wave"):
        tiles = np.ceil(m / 128) * np.ceil(n / 128)
        waves = np.ceil(tiles / sms)
        if variant.endswith("full"):
            waves = np.where(tiles >= sms, waves, tiles / sms)
        return np.maximum(waves * sms * 128 * 128 / n, m)
    return m


def fit(variant: str) -> None:
    d, gpus, names = rows()
    g = d["g"].astype(int)
    ng = len(gpus)
    f = np.array([get_gpu(x).flops for x in gpus])[g]
    bw = np.array([get_gpu(x).mem_bw for x in gpus])[g]
    ridge = np.array([ridge_tokens(get_gpu(x), 2) for x in gpus])[g]
    mq = rows_m(d, np.array([SMS[x] for x in gpus])[g], variant)
    m, k, n = d["m"], d["k"], d["n"]

    def pred(p: np.ndarray) -> np.ndarray:
        ef, eb = p[3 : 3 + ng][g], p[3 + ng :][g]
        tc = 2.0 * n * k * (mq + p[0] * ridge) / (ef * f)
        tm = 2.0 * (m * k + k * n + m * n) / (eb * bw)
        return p[1] * 1e-6 + (tc ** p[2] + tm ** p[2]) ** (1.0 / p[2])

    x0 = np.array([0.3, 3.0, 3.0, *([0.75] * ng), *([0.8] * ng)])
    lo = [0.0, 0.0, 1.0, *([0.05] * ng), *([0.05] * ng)]
    hi = [20.0, 50.0, 12.0, *([1.0] * ng), *([1.0] * ng)]
    r = least_squares(lambda p: np.log(pred(p) / d["t"]), x0, bounds=(lo, hi),
                      loss="soft_l1", f_scale=0.1)  # fmt: skip
    e = np.abs(pred(r.x) / d["t"] - 1.0)
    band = (m >= 64) & (m <= 512)
    print(f"{variant:13s} all: median {100 * np.median(e):.1f} % p95 "
          f"{100 * np.quantile(e, 0.95):.1f} % worst {100 * e.max():.0f} % | 64–512 tokens: "
          f"median {100 * np.median(e[band]):.1f} % worst {100 * e[band].max():.0f} %")  # fmt: skip
    for j in np.argsort(-e)[:3]:
        print(f"    {names[j]}: {100 * e[j]:.0f} %")


if __name__ == "__main__":
    for v in ("none", "m64", "m128", "wave128", "wave128-full"):
        fit(v)
