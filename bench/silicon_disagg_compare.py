"""Two replays of the disaggregated silicon rows side by side (``bench/silicon_disagg.py``
results): median |error| of TTFT and TPOT and rows off by 2× per slice, and the TTFT gap
(measured − simulated, ms) by group at low concurrency, where the queue is short and a fixed
per-request cost shows as itself.

    python bench/silicon_disagg_compare.py s30_disagg s31_disagg [--low-c 8]

Slices: all, engine, GPU, ISL/OSL, model, C ≤ low-c / 8 < C < 128 / C ≥ 128. Only rows that
ran in both replays are compared.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import md_table

RESULTS = Path(__file__).resolve().parent / "results" / "silicon"


def load(tag: str) -> pd.DataFrame:
    d = pd.read_csv(RESULTS / f"{tag}.csv.gz")
    return d[d.status == "ok"].set_index("id")


def band(c: int, low: int) -> str:
    return f"C <= {low}" if c <= low else ("C >= 128" if c >= 128 else f"{low} < C < 128")


def _acc(d: pd.DataFrame) -> str:
    return (
        f"{100 * d.ttft_err.abs().median():.1f} % / {100 * d.tpot_err.abs().median():.1f} % "
        f"/ {int(d.off_2x.sum())}"
    )


def slices(a: pd.DataFrame, b: pd.DataFrame, low: int) -> list[list[str]]:
    """[slice, rows, before, after] (TTFT / TPOT median |error|, rows off by 2×)."""
    out = [["all", str(len(a)), _acc(a), _acc(b)]]
    a, b = a.assign(band=[band(c, low) for c in a.concurrency]), b.copy()
    b["band"] = a["band"]
    for col in ("engine", "gpu", "isl_osl", "model", "band"):
        for key, grp in a.groupby(col, sort=True):
            out.append([f"{col} {key}", str(len(grp)), _acc(grp), _acc(b.loc[grp.index])])
    return out


def gaps(a: pd.DataFrame, b: pd.DataFrame, low: int) -> list[list[str]]:
    """[group, rows, median gap before, median gap after] at C ≤ low (ms)."""
    keep = a.concurrency <= low
    a, b = a[keep], b.loc[a[keep].index]
    ga, gb = a.silicon_ttft_ms - a.sim_ttft_ms, b.silicon_ttft_ms - b.sim_ttft_ms
    out = [["all", str(len(a)), f"{ga.median():.0f}", f"{gb.median():.0f}"]]
    for col in ("engine", "gpu", "isl_osl", "split", "concurrency"):
        for key, idx in a.groupby(col, sort=True).groups.items():
            out.append([f"{col} {key}", str(len(idx)), f"{ga[idx].median():.0f}",
                        f"{gb[idx].median():.0f}"])  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("before")
    p.add_argument("after")
    p.add_argument("--low-c", type=int, default=8)
    a = p.parse_args(argv)
    before, after = load(a.before), load(a.after)
    both = before.index.intersection(after.index)
    before, after = before.loc[both], after.loc[both]
    head = ["slice", "rows", f"{a.before}: TTFT / TPOT / > 2×", f"{a.after}"]
    print(md_table(head, slices(before, after, a.low_c)))
    print(f"\nTTFT gap, measured − simulated, median ms at C <= {a.low_c}:\n")
    print(md_table(["group", "rows", a.before, a.after], gaps(before, after, a.low_c)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
