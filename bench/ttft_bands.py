"""Where the replay's TTFT error sits: signed median error and median measured − simulated ms
of ``bench/silicon.py`` results, by GPU × concurrency band × ISL band (issue 28,
docs/design/ttft_gap.md). With a second result file, both side by side on the rows they share.

    python bench/ttft_bands.py bench/results/silicon/s30.csv.gz [AFTER.csv.gz]
        [--filter REGEX] [--by gpu,cband,iband] [--engine-side]

``--engine-side`` compares the engine-side TTFT (``sim_ttft_engine_ms``, no API-server
constant) instead of the client-side one.
"""

from __future__ import annotations

import argparse

import polars as pl

C_BANDS = ((4, "C 1-4"), (64, "C 8-64"), (10**9, "C >= 65"))
ISL_BANDS = ((1500, "ISL <= 1.5k"), (5000, "ISL 2-5k"), (10**9, "ISL > 5k"))


def _band(col: str, bands: tuple[tuple[int, str], ...]) -> pl.Expr:
    expr = pl.when(pl.col(col) <= bands[0][0]).then(pl.lit(bands[0][1]))
    for hi, name in bands[1:]:
        expr = expr.when(pl.col(col) <= hi).then(pl.lit(name))
    return expr


def load(path: str, regex: str | None, engine_side: bool) -> pl.DataFrame:
    """The rows that ran, with their bands and the compared simulated TTFT as ``sim``."""
    d = pl.read_csv(path).filter(pl.col("status") == "ok")
    if regex:
        key = pl.concat_str(["id", "engine", "version", "model", "gpu", "precision"],
                            separator=" ", ignore_nulls=True)  # fmt: skip
        d = d.filter(key.str.contains(regex))
    sim = "sim_ttft_engine_ms" if engine_side else "sim_ttft_ms"
    return d.with_columns(
        cband=_band("concurrency", C_BANDS), iband=_band("isl", ISL_BANDS),
        sim=pl.col(sim),
    )  # fmt: skip


def table(d: pl.DataFrame, by: list[str], tag: str) -> pl.DataFrame:
    """Per group: rows, signed median error (%), median |error| (%), median measured −
    simulated (ms), rows off by more than 2× in TTFT."""
    err = pl.col("sim") / pl.col("silicon_ttft_ms") - 1
    ratio = pl.col("sim") / pl.col("silicon_ttft_ms")
    return d.group_by(by).agg(
        pl.len().alias("n"),
        (err.median() * 100).round(1).alias(f"signed_{tag}"),
        (err.abs().median() * 100).round(1).alias(f"abs_{tag}"),
        (pl.col("silicon_ttft_ms") - pl.col("sim")).median().round(1).alias(f"gap_ms_{tag}"),
        ((ratio > 2) | (ratio < 0.5)).sum().alias(f"x2_{tag}"),
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", nargs="+", help="one or two bench/silicon.py result files")
    ap.add_argument("--filter", default=None, help="regex on id/engine/version/model/gpu")
    ap.add_argument("--by", default="gpu,cband,iband", help="comma-separated columns")
    ap.add_argument("--engine-side", action="store_true")
    a = ap.parse_args()
    by = a.by.split(",")
    frames = [load(p, a.filter, a.engine_side) for p in a.results[:2]]
    if len(frames) == 2:  # the rows both ran
        ids = frames[0].select("id").join(frames[1].select("id"), on="id")
        frames = [f.join(ids, on="id") for f in frames]
    out = table(frames[0], by, "a")
    if len(frames) == 2:
        out = out.join(table(frames[1], by, "b").drop("n"), on=by)
    pl.Config.set_tbl_rows(500)
    pl.Config.set_tbl_width_chars(250)
    print(out.sort(by))
    for i, f in enumerate(frames):
        t = table(f.with_columns(pl.lit("all").alias("all")), ["all"], "ab"[i])
        print(t)


if __name__ == "__main__":
    main()
