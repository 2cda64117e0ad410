"""Interpolation acceptance (issue 28): remove every other grid point of a measured table,
rebuild the table from the rest, and report the |error| at the removed points.

    python bench/interp_holdout.py [--source vidur|aic] [--gpu h100_sxm] [--engine vllm]
                                   [--version 0.24.0] [--interp table|curve|loglog]

Generic over a table builder ``build(points) -> f``: ``points`` are ``(coords, value)`` pairs
of one table (``coords`` a tuple, one number per axis), ``f(coords)`` the table's estimate.
Along each axis in turn, the grid values of that axis are thinned to the even indices (and the
last, so nothing is extrapolated); the points at the dropped values (every other axis kept
whole) are predicted from the rest and compared with their measurement: |f(x)/y − 1|.
Builders here: :class:`tidal.hardware.interp.Curve` (1-D, piecewise linear; ``loglog``: linear
in log x and log y), the measured model's monotone bilinear ``_Table2D`` (2-D), and 2-D
tables as 1-D curves along the held-out axis. Sources: the bundled Vidur profiles
(linear operators over tokens, all-reduce over bytes, decode and prefill attention grids) and
aiconfigurator-core's tables of one GPU / engine / version (GEMM over m per dtype, kernel,
n, k; context attention over batch × ISL and generation attention over batch × step, per head
shape and KV dtype). Duplicate measurements of one point are replaced by their median.
``--pairs``: grid values one apart count as one grid point (the GEMM grid brackets tile edges
with m and m + 1: dropping one of a pair tests a step, not the interpolation).
Acceptance: median |error| ≤ 3 % at the removed points.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import md_table, save

Coords = tuple[float, ...]
Point = tuple[Coords, float]
Builder = Callable[[list[Point]], Callable[[Coords], float]]


def kept_values(values: Iterable[float], pairs: bool = False) -> set[float]:
    """The grid values an axis keeps: even indices of the sorted distinct values, and the last.
    ``pairs``: values one apart (a grid of tile edges m, m + 1) count as one grid point."""
    v = sorted(set(values))
    groups: list[list[float]] = []
    for x in v:
        if pairs and groups and x - groups[-1][-1] == 1:
            groups[-1].append(x)
        else:
            groups.append([x])
    keep = {x for g in groups[::2] for x in g}
    keep.update(groups[-1])
    return keep


def holdout(points: Sequence[Point], build: Builder, axis: int, pairs: bool = False) -> list[float]:
    """|f(x)/y − 1| at the points whose coordinate on ``axis`` the thinned grid dropped, f
    built from the other points. Empty when the axis has fewer than 3 values or no positive y."""
    values = [c[axis] for c, _ in points]
    if len(set(values)) < 3:
        return []
    keep = kept_values(values, pairs)
    train = [p for p in points if p[0][axis] in keep]
    test = [p for p in points if p[0][axis] not in keep and p[1] > 0]
    if not test:
        return []
    f = build(train)
    return [abs(f(c) / y - 1.0) for c, y in test]


def dedupe(points: Iterable[Point]) -> list[Point]:
    """One point per coordinate: the median of repeated measurements, sorted by coordinates."""
    by: dict[Coords, list[float]] = defaultdict(list)
    for c, y in points:
        by[c].append(y)
    return [(c, statistics.median(ys)) for c, ys in sorted(by.items())]


# ------------------------------------------------------------------ builders
def curve_builder(points: list[Point]) -> Callable[[Coords], float]:
    """1-D: :class:`tidal.hardware.interp.Curve` through the points."""
    from tidal.hardware.interp import Curve

    pts = dedupe(points)
    curve = Curve([c[0] for c, _ in pts], [y for _, y in pts])
    return lambda c: curve.at(c[0])


def loglog_curve_builder(points: list[Point]) -> Callable[[Coords], float]:
    """1-D: piecewise linear in (log x, log y) — a power law between grid points — through a
    :class:`~tidal.hardware.interp.Curve` (x and y must be positive)."""
    import math

    from tidal.hardware.interp import Curve

    pts = [(c, y) for c, y in dedupe(points) if c[0] > 0 and y > 0]
    curve = Curve([math.log(c[0]) for c, _ in pts], [math.log(y) for _, y in pts])
    return lambda c: math.exp(curve.at(math.log(c[0])))


def table2d_builder(points: list[Point]) -> Callable[[Coords], float]:
    """2-D: the measured model's monotone bilinear table (cells not measured: filled by it)."""
    from tidal.hardware.measured import _Table2D
    from tidal.hardware.opprofile import Grid2D

    pts = dict(dedupe(points))
    rows = sorted({c[0] for c in pts})
    cols = sorted({c[1] for c in pts})
    us = [[pts.get((r, c)) for c in cols] for r in rows]
    table = _Table2D(Grid2D(rows=[int(r) for r in rows], cols=[int(c) for c in cols], us=us))
    return lambda c: table.at(c[0], c[1])


def line_builder(build1: Builder, axis: int) -> Builder:
    """A 2-D table as 1-D curves along ``axis``, one per value of the other axis (exact there)."""
    other = 1 - axis

    def build(points: list[Point]) -> Callable[[Coords], float]:
        by: dict[float, list[Point]] = defaultdict(list)
        for c, y in points:
            by[c[other]].append(((c[axis],), y))
        fs = {k: build1(v) for k, v in by.items()}
        return lambda c: fs[c[other]]((c[axis],))

    return build


# ------------------------------------------------------------------ tables
Table = tuple[str, list[Point]]
"""(family, points): the family groups the report."""


def vidur_tables() -> list[Table]:
    """The bundled profiles: linear ops (tokens), all-reduce (bytes), attention grids."""
    from tidal.hardware.opprofile import bundled_profiles

    out: list[Table] = []
    for prof in bundled_profiles():
        for lin in prof.linear:
            for op, us in {**lin.layer_us, **lin.step_us}.items():
                pts1 = [((float(t),), u) for t, u in zip(lin.tokens, us, strict=True)]
                out.append((f"linear {op}", pts1))
        for ar in prof.all_reduce:
            pts1 = [((float(b),), u) for b, u in zip(ar.bytes, ar.us, strict=True)]
            out.append(("all_reduce", pts1))
        for att in prof.attention:
            for name, g in (("decode", att.decode), ("prefill", att.prefill)):
                if g is None:
                    continue
                pts = [((float(r), float(c)), u) for r, row in zip(g.rows, g.us, strict=True)
                       for c, u in zip(g.cols, row, strict=True) if u is not None]  # fmt: skip
                out.append((f"attention {name}", pts))
    return out


def _aic_dir(gpu: str) -> Path:
    from silicon_rows import sample_path

    return sample_path().parent / "data" / gpu


def aic_frame_tables(path: Path, axes: Sequence[str], family: str) -> list[Table]:
    """One table per combination of the frame's other columns (latency excluded)."""
    import polars as pl

    df = pl.read_parquet(path)
    skip = {"latency", "framework", "version", "device", "op_name", *axes}
    keys = [c for c in df.columns if c not in skip and df[c].n_unique() > 1]
    out = []
    for _, part in df.group_by(keys, maintain_order=True):
        pts = [(tuple(float(v) for v in r[:-1]), float(r[-1]))
               for r in part.select([*axes, "latency"]).iter_rows()]  # fmt: skip
        out.append((family, pts))
    return out


def aic_tables(gpu: str, engine: str, version: str) -> list[Table]:
    base = _aic_dir(gpu)
    out: list[Table] = []
    specs = [
        (f"gemm/{engine}/{version}/gemm_perf.parquet", ("m",), "gemm (m)"),
        (f"attention/{engine}/{version}/context_attention_perf.parquet",
         ("batch_size", "isl"), "context attention (batch × isl)"),
        (f"attention/{engine}/{version}/generation_attention_perf.parquet",
         ("batch_size", "step"), "generation attention (batch × step)"),
    ]  # fmt: skip
    for rel, axes, family in specs:
        path = base / rel
        if path.exists():
            out += aic_frame_tables(path, axes, family)
        else:
            print(f"no table {path}", file=sys.stderr)
    return out


# ------------------------------------------------------------------ report
def evaluate(tables: list[Table], interp: str, pairs: bool = False) -> dict[str, dict[str, Any]]:
    """Per family and axis: the removed points' errors (median, p90, max, count); ``pairs``
    applies to the GEMM tables' m axis only."""
    errs: dict[str, list[float]] = defaultdict(list)
    for family, pts in tables:
        dim = len(pts[0][0]) if pts else 0
        one: Builder = loglog_curve_builder if interp == "loglog" else curve_builder
        for axis in range(dim):
            build = one if dim == 1 else table2d_builder if interp == "table" else None
            errs[f"{family} / axis {axis}"] += holdout(
                pts, build or line_builder(one, axis), axis, pairs and family.startswith("gemm")
            )
    out = {}
    for k, e in sorted(errs.items()):
        if e:
            s = sorted(e)
            out[k] = {"n": len(s), "median": statistics.median(s),
                      "p90": s[int(0.9 * (len(s) - 1))], "max": s[-1]}  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--source", choices=("vidur", "aic"), default="vidur")
    p.add_argument("--gpu", default="h100_sxm")
    p.add_argument("--engine", default="vllm")
    p.add_argument("--version", default="0.24.0")
    p.add_argument("--interp", choices=("table", "curve", "loglog"), default="table",
                   help="1-D: linear (table, curve) or log-log (loglog) curves; 2-D: the "
                   "bilinear table, or 1-D curves along the held-out axis")  # fmt: skip
    p.add_argument("--pairs", action="store_true",
                   help="GEMM m values one apart (tile edges) are one grid point")
    a = p.parse_args(argv)
    tables = vidur_tables() if a.source == "vidur" else aic_tables(a.gpu, a.engine, a.version)
    res = evaluate(tables, a.interp, a.pairs)
    rows = [[k, v["n"], f"{100 * v['median']:.2f} %", f"{100 * v['p90']:.1f} %",
             f"{100 * v['max']:.0f} %"] for k, v in res.items()]  # fmt: skip
    allerr = [v["median"] for v in res.values()]
    print(md_table(["table / held-out axis", "points", "median |err|", "p90", "max"], rows))
    if allerr:
        print(f"\nworst family median: {100 * max(allerr):.2f} % (acceptance: ≤ 3 %)")
    tag = f"interp_holdout_{a.source}_{a.interp}" + ("_pairs" if a.pairs else "")
    tag += "" if a.source == "vidur" else f"_{a.gpu}_{a.engine}_{a.version}"
    print(f"wrote {save(tag, {'args': vars(a), 'results': res})}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
