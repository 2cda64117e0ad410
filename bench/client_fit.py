"""Fit of the API server's request path (``tidal.hardware.api_server``) on ONE GPU's rows of the
silicon sample, and its held-out check on the others (issue 28 item 5).

    python bench/client_fit.py bench/results/silicon/<tag>.csv.gz [...] [--fit-gpu h100_sxm]
                               [--engine vllm] [--max-c 0]

Reads a ``bench/silicon.py`` result (its engine-side TTFT per row: ``sim_ttft_engine_ms``, or
``sim_ttft_ms`` of a run that had no client-side metric) and fits the client-side TTFT

    TTFT_client = TTFT_engine + request_s + prompt_token_s · P̄,   P̄ = (⌊0.8·ISL⌋ + ISL) / 2

(the mean prompt of the reference client's lengths, uniform on ``[⌊0.8·L⌋, L]``) by a grid
search minimising the median |relative error| of the fit GPU's rows of ``--engine`` (the
acceptance metric; ``--max-c C``: only rows of concurrency ≤ C, where queueing is small).
Both the two-constant fit and the constant-only one (``prompt_token_s = 0``) are printed, with
the median |error| TTFT, the rows off by > 2× (TTFT) and the median signed error, per GPU
before (engine-side) and after (client-side): the fit GPU first, then the held-out ones.
Nothing else is fitted; TPOT is unchanged by the model.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import statistics
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np


def load(path: Path, engine: str) -> list[dict[str, float | str]]:
    with gzip.open(path, "rt") as f:
        rows = [r for r in csv.DictReader(f) if r["status"] == "ok" and r["engine"] == engine]
    out = []
    for r in rows:
        sim = r.get("sim_ttft_engine_ms") or r["sim_ttft_ms"]
        isl = int(r["isl"])
        out.append({
            "gpu": r["gpu"], "source": r["source"], "model": r["model"], "c": int(r["concurrency"]),
            "isl": isl, "p": (int(0.8 * isl) + isl) / 2.0, "sim": float(sim),
            "meas": float(r["silicon_ttft_ms"]),
        })  # fmt: skip
    return out


def errors(rows: list[dict], a_ms: float, b_ms: float) -> np.ndarray:
    sim = np.array([r["sim"] for r in rows]) + a_ms + b_ms * np.array([r["p"] for r in rows])
    return sim / np.array([r["meas"] for r in rows]) - 1.0


def fit(rows: list[dict], with_tokens: bool) -> tuple[float, float]:
    """(request ms, ms per prompt token) minimising the median |relative error|."""
    best = (np.inf, 0.0, 0.0)
    for b in np.arange(0.0, 0.1001, 0.0005) if with_tokens else [0.0]:
        for a in np.arange(0.0, 150.01, 0.5):
            m = float(np.median(np.abs(errors(rows, a, b))))
            if m < best[0]:
                best = (m, float(a), float(b))
    return best[1], best[2]


def line(name: str, rows: list[dict], a: float, b: float) -> str:
    e0, e1 = errors(rows, 0.0, 0.0), errors(rows, a, b)
    def s(e: np.ndarray) -> str:
        off = int(np.sum((e + 1 < 0.5) | (e + 1 > 2.0)))
        return (f"{100 * np.median(np.abs(e)):5.1f} % (signed {100 * np.median(e):+6.1f} %, "
                f"> 2×: {off:3d})")  # fmt: skip
    return f"  {name:<22} {len(rows):4d} rows  before {s(e0)}   after {s(e1)}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("results", type=Path, nargs="+", help="one or more bench/silicon.py results")
    p.add_argument("--fit-gpu", default="h100_sxm")
    p.add_argument("--engine", default="vllm")
    p.add_argument("--max-c", type=int, default=0, help="fit on rows of concurrency ≤ C (0: all)")
    a = p.parse_args(argv)
    rows = [r for path in a.results for r in load(path, a.engine)]
    train = [r for r in rows if r["gpu"] == a.fit_gpu and (a.max_c <= 0 or r["c"] <= a.max_c)]
    if not train:
        print(f"no {a.engine} rows of {a.fit_gpu}", file=sys.stderr)
        return 1
    by_gpu: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        by_gpu[r["gpu"]].append(r)
    order = [a.fit_gpu, *sorted(g for g in by_gpu if g != a.fit_gpu)]
    for with_tokens in (True, False):
        ra, rb = fit(train, with_tokens)
        print(f"fit on {len(train)} {a.engine} rows of {a.fit_gpu}"
              f"{f' (C ≤ {a.max_c})' if a.max_c else ''}: request {ra:.1f} ms, "
              f"{1e3 * rb:.1f} µs per prompt token")  # fmt: skip
        for g in order:
            tag = "fit" if g == a.fit_gpu else "held out"
            print(line(f"{g} ({tag})", by_gpu[g], ra, rb))
        held = [r for g in order[1:] for r in by_gpu[g]]
        if held:
            print(line("all held out", held, ra, rb))
        by_src: dict[str, list[dict]] = defaultdict(list)
        for r in rows:
            by_src[f"{r['gpu']}/{str(r['source'])[:14]}"].append(r)
        for k in sorted(by_src):
            print(line(k, by_src[k], ra, rb))
        med = statistics.median(r["meas"] - r["sim"] for r in train)
        print(f"  median residual (measured − engine-side) on the fit rows: {med:.1f} ms\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
