"""Fit the step-level interference ΔI_step(r) = c0 + c1·r + c2·r² of Qwen3-8B on H200 and
RTX PRO 6000 (ebplus.md §1.5, Q2).

The paper's β_MB^e(r) was fitted to 1/throughput of whole vLLM-v1 runs; charging it per step on
top of α and the context-dependent decode cost double-counts. So we choose ΔI_step such that the
simulator's saturated MB (best (B, N) of a grid, 4000 requests, c = 2048, uniform ±50 % lengths,
100 warm-ups) reproduces a measured v1 throughput on the three synthetic mixes (r = 0.889, 0.5,
0.111): Newton iterations on the three coefficients (Jacobian by finite differences at the current
best cells), re-gridding between iterations. Targets: ``fig4`` (default) = the paper's Fig. 4 v1
throughput (RPS × mean tokens; each scheduler at its best (B, N) — the same figure the EB-vs-MB
acceptance shapes come from); ``bmb`` = 1/β_MB^e(r) of the authors' quadratic fit (a different,
lower-throughput set of v1 runs). Prints the constants for ``hardware/interference.py``.

    nice python bench/ebplus_calibrate.py [--target fig4|bmb] [--gpus h200 rtx-pro-6000]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from _common import save
from ebplus_common import GRID_B, GRID_N, MIXES, Cell, fig4_tokps, run_cell, with_step_interference

from tidal.hardware.interference import (
    MB_COST_FITS,
    STEP_INTERFERENCE,
    Quadratic,
    paper_interference,
)

GRID_B_CAL = (8192, 14336, 18432)
GRID_N_CAL = (512, 1024, 1536, 2048)
"""A reduced grid for the fit (the best MB cells of the full grid lie in it); the result is
checked on the full grid afterwards."""


def targets(gpu: str, kind: str) -> dict[str, float]:
    if kind == "fig4":
        return fig4_tokps(gpu, "mb")
    fit = MB_COST_FITS[("qwen3-8b", gpu, 1)]
    return {m: 1.0 / fit(o / (p + o)) for m, (p, o) in MIXES.items()}


def mb_tokps(gpu: str, q: Quadratic, cells: dict[str, tuple[int, int]]) -> dict[str, float]:
    with_step_interference(gpu, q)
    out = {}
    for mix, (b, n) in cells.items():
        p, o = MIXES[mix]
        out[mix] = run_cell(Cell(gpu, "mb", p, o, 2048, b, n))["token_throughput"]
    return out


def best_cells(
    gpu: str, q: Quadratic, grid_b: tuple[int, ...], grid_n: tuple[int, ...]
) -> tuple[dict[str, tuple[int, int]], dict[str, float]]:
    with_step_interference(gpu, q)
    cells, tput = {}, {}
    for mix, (p, o) in MIXES.items():
        best = (0.0, (0, 0))
        for b in grid_b:
            for n in grid_n:
                if b >= n:
                    t = run_cell(Cell(gpu, "mb", p, o, 2048, b, n))["token_throughput"]
                    best = max(best, (t, (b, n)))
        cells[mix], tput[mix] = best[1], best[0]
    return cells, tput


def fit_scale(gpu: str, kind: str) -> tuple[Quadratic, dict[str, object]]:
    """One factor s on the paper's ΔI shape (Q2: "rescale ΔI"), minimising the squared log
    error of best-of-grid MB throughput over the three mixes (golden-section search)."""
    tgt = targets(gpu, kind)
    q0 = paper_interference("qwen3-8b", gpu)
    assert q0 is not None
    memo: dict[float, tuple[float, dict[str, float]]] = {}

    def loss(s: float) -> float:
        if s not in memo:
            _, tput = best_cells(gpu, q0.scaled(s), GRID_B_CAL, GRID_N_CAL)
            err = sum(np.log(tput[m] / tgt[m]) ** 2 for m in MIXES)
            memo[s] = (err, tput)
            print(f"  s = {s:.4f}: tok/s { ({m: round(v) for m, v in tput.items()}) }")
        return memo[s][0]

    lo, hi = 0.0, 1.5
    g = (5**0.5 - 1) / 2
    a, b = hi - g * (hi - lo), lo + g * (hi - lo)
    for _ in range(14):
        if loss(a) < loss(b):
            hi, b = b, a
            a = hi - g * (hi - lo)
        else:
            lo, a = a, b
            b = lo + g * (hi - lo)
    s = round((lo + hi) / 2, 3)
    q = q0.scaled(s)
    cells, tput = best_cells(gpu, q, GRID_B, GRID_N)
    err = {m: tput[m] / tgt[m] - 1 for m in MIXES}
    print(f"  final s = {s}: full-grid best tok/s {tput} (target {tgt}); error {err}; {cells}")
    return q, {"scale": s, "target": tgt, "tokps": tput, "error": err, "cells": cells}


def fit(gpu: str, kind: str, iters: int = 4) -> tuple[Quadratic, dict[str, object]]:
    tgt = targets(gpu, kind)
    q0 = paper_interference("qwen3-8b", gpu)
    assert q0 is not None
    c = np.array([q0.c0, q0.c1, q0.c2])
    y = np.array([1.0 / tgt[m] for m in MIXES])  # seconds per token
    log = []
    for it in range(iters):
        q = Quadratic(*c)
        cells, tput = best_cells(gpu, q, GRID_B_CAL, GRID_N_CAL)
        x = np.array([1.0 / tput[m] for m in MIXES])
        jac = np.zeros((3, 3))
        for j in range(3):
            h = max(abs(c[j]) * 0.1, 2e-6)
            cj = c.copy()
            cj[j] += h
            tj = mb_tokps(gpu, Quadratic(*cj), cells)
            jac[:, j] = (np.array([1.0 / tj[m] for m in MIXES]) - x) / h
        step = np.linalg.solve(jac, y - x)
        log.append({"iter": it, "coeffs": c.tolist(), "cells": cells, "tokps": tput})
        print(f"  iter {it}: c = {c}, tok/s = {tput}, cells = {cells}")
        c = c + step
        # ΔI must stay ≥ 0 on [0, 1]: keep the intercept non-negative
        c[0] = max(c[0], 0.0)
    q = Quadratic(*c)
    cells, tput = best_cells(gpu, q, GRID_B, GRID_N)
    err = {m: tput[m] / tgt[m] - 1 for m in MIXES}
    print(f"  final {q}: full-grid best tok/s {tput} (target {tgt}); error {err}; cells {cells}")
    return q, {"target": tgt, "tokps": tput, "error": err, "cells": cells, "log": log}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", choices=["fig4", "bmb"], default="fig4")
    ap.add_argument("--gpus", nargs="+", default=["h200", "rtx-pro-6000"])
    ap.add_argument(
        "--mode",
        choices=["scale", "quadratic"],
        default="scale",
        help="scale: one factor on the paper's ΔI shape; quadratic: free c0, c1, c2 (Newton)",
    )
    args = ap.parse_args()
    out = {}
    for gpu in args.gpus:
        t0 = time.perf_counter()
        print(f"{gpu} (targets: {args.target})")
        q, info = (fit_scale if args.mode == "scale" else fit)(gpu, args.target)
        out[gpu] = {"coeffs": [q.c0, q.c1, q.c2], **info, "wall_s": time.perf_counter() - t0}
        STEP_INTERFERENCE[("qwen3-8b", gpu, 1)] = q
    print("\nSTEP_INTERFERENCE constants:")
    for gpu, v in out.items():
        c0, c1, c2 = v["coeffs"]
        print(f'    (ANCHOR_MODEL, "{gpu}", 1): Quadratic({c0:.4e}, {c1:.4e}, {c2:.4e}),')
    save(f"ebplus_calibrate_{args.target}", out)


if __name__ == "__main__":
    main()
