"""Where WarmServe's per-model P99 guarantee holds on the robustness grid (issue 18, item 4).

    nice python bench/robustness.py --families warmserve --out OUT_DEFAULT
    nice python bench/robustness.py --families warmserve --out OUT_FB \\
        --warmserve-opts '{"overload_fallback": true}'
    python bench/warmserve_fallback.py OUT_DEFAULT/robustness.json OUT_FB/robustness.json \\
        [--out bench/results/robustness/warmserve_fallback.md]

Per cell: ``met`` (the defaults hold "P99 TTFT ≤ ServerlessLLM's for every model"),
``fallback`` (only the opt-in overload fallback, ServerlessLLM's rules past a 20-s wait,
holds it), ``open``. Writes the counts and every cell where the two runs differ, with the
worst model's P99 ratio and the SLO attainment of both runs and of ServerlessLLM: the
fallback's price is attainment.
"""

from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path
from typing import Any

from _common import md_table


def load(path: Path) -> dict[tuple[Any, ...], dict[str, Any]]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        rows = json.load(f)["results"]["warmserve"]
    return {tuple(r["label"].values()): r["check"] for r in rows}


def verdict(d: dict[str, Any], f: dict[str, Any] | None) -> str:
    if d["ok"]:
        return "met"
    return "fallback" if f is not None and f["ok"] else "open"


def cell(c: dict[str, Any] | None) -> str:
    if c is None:
        return "—"
    mark = "✓" if c["ok"] else "✗"
    return f"{c['worst_model_ratio']:.2f} {mark} ({100 * c['attainment']['warmserve']:.1f} %)"


def report(default: Path, fallback: Path) -> str:
    d, f = load(default), load(fallback)
    v = {k: verdict(d[k], f.get(k)) for k in d}
    counts = [[name, f"{sum(x == name for x in v.values())} of {len(v)}"]
              for name in ("met", "fallback", "open")]  # fmt: skip
    rows = []
    for k in sorted(d, key=str):
        a, b = d[k], f.get(k)
        if b is not None and (a["p99"], a["attainment"]) == (b["p99"], b["attainment"]):
            continue
        sllm = 100 * a["attainment"]["serverlessllm"]
        past = "yes" if a["past_capacity"] else "no"
        rows.append([" ".join(str(x) for x in k), past, cell(a), cell(b), f"{sllm:.1f} %", v[k]])
    lines = [md_table(["verdict", "cells"], counts)]
    lines += ["", "Cells where the fallback changes anything (worst model's P99 WarmServe / "
              "ServerlessLLM, SLO attainment):", ""]  # fmt: skip
    head = ["cell", "past capacity", "defaults", "overload_fallback", "ServerlessLLM", "verdict"]
    lines.append(md_table(head, rows))
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("default", type=Path)
    ap.add_argument("fallback", type=Path)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    text = report(args.default, args.fallback)
    if args.out is not None:
        tmp = args.out.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.replace(args.out)
    print(text, end="")


if __name__ == "__main__":
    main()
