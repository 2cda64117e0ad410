"""Where each of EB⁺'s guarantees holds on the robustness grid (issue 18, item 4).

    nice python bench/robustness.py --families ebplus --out OUT_DEFAULT
    nice python bench/robustness.py --families ebplus --out OUT_THR \\
        --ebplus-opts '{"prefer": "throughput"}'
    python bench/ebplus_fallback.py OUT_DEFAULT/robustness.json OUT_THR/robustness.json \\
        [--out bench/results/robustness/ebplus_fallback.md]

Per cell (:func:`robustness_grid.ebplus_verdict`): ``strict`` (the issue's rule with the
defaults), ``frontier`` (defaults, ``prefer: no-preemption``: preemptions ≤ min(EB, MB) + 0.2 %
and within 1 % of every baseline preempting no more), ``throughput`` (``prefer: throughput``
within 1 % of max(EB, MB), preempting ≤ the faster baseline + 0.2 %), ``open``. Writes the
counts, a table by model × mix and every ``open`` cell.
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
from pathlib import Path
from typing import Any

import robustness_grid as rg
from _common import md_table

VERDICTS = ("strict", "frontier", "throughput", "open")


def load(path: Path) -> dict[tuple[Any, ...], dict[str, Any]]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        rows = json.load(f)["results"]["ebplus"]
    return {tuple(r["label"].values()): r["check"] for r in rows}


def verdicts(default: Path, throughput: Path | None) -> dict[tuple[Any, ...], str]:
    d = load(default)
    t = load(throughput) if throughput is not None else {}
    return {k: rg.ebplus_verdict(c, t.get(k)) for k, c in d.items()}


def report(v: dict[tuple[Any, ...], str]) -> str:
    counts = collections.Counter(v.values())
    lines = [
        "| verdict | cells |",
        "|---|---|",
        *(f"| {k} | {counts.get(k, 0)} of {len(v)} |" for k in VERDICTS),
        "",
    ]
    by = collections.defaultdict(collections.Counter)
    for (_gpu, model, _tp, mix, _c), verdict in v.items():
        by[(model, mix)][verdict] += 1
    rows = [[m, mix, *(str(by[(m, mix)].get(k, 0)) for k in VERDICTS)] for (m, mix) in sorted(by)]
    lines += [md_table(["model", "mix", *VERDICTS], rows), ""]
    lines += [
        f"- open: {dict(zip(('gpu', 'model', 'tp', 'mix', 'c'), k, strict=True))}"
        for k, x in v.items()
        if x == "open"
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("default", type=Path)
    ap.add_argument("throughput", type=Path, nargs="?")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    text = report(verdicts(args.default, args.throughput))
    if args.out is not None:
        args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
