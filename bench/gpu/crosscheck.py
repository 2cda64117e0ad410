"""Step times of a freshly measured ``tidal profile-gpu`` file beside the other perf models.

For every (model, TP) of the profile: pure-decode steps (batch n, 512 tokens of context each —
the EB paper's calibration context) and single-chunk prefills (P tokens, no cache), timed by the
measured model (``measured:PATH``; shapes off the profile's grids are left out), the EB paper's
linear constants where they were measured (``linear``; Qwen3-8B on H200 and RTX PRO 6000), the
corrected roofline and the roofline. Writes JSON rows and prints ratios to the measured model.

Usage: python bench/gpu/crosscheck.py PROFILE.json --out crosscheck.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from tidal.hardware.calibration import build_perf_model
from tidal.hardware.gpus import get_gpu
from tidal.hardware.models import get_model
from tidal.hardware.opprofile import load_profile

DECODE = (1, 16, 64, 256, 512)
PREFILL = (256, 1024, 4096)
OTHERS = ("linear", "corrected-roofline", "roofline")


def shapes(prof: Any) -> list[tuple[str, tuple[int, int, int, int, int, int]]]:
    """The shapes above that lie inside the profile's grids (no extrapolation)."""
    top_tok = max(max(x.tokens) for x in prof.linear)
    dec = next((a.decode for a in prof.attention if a.decode is not None), None)
    pre = next((a.prefill for a in prof.attention if a.prefill is not None), None)
    out = []
    if dec is not None:
        ctx = 512 if dec.cols[0] <= 512 <= dec.cols[-1] else dec.cols[-1]
        for n in [n for n in DECODE if n <= min(dec.rows[-1], top_tok)] or dec.rows[:1]:
            out.append((f"decode n={n} ctx={ctx}", (n, ctx * n, 0, 0, 0, 0)))
    if pre is not None:
        for p in [p for p in PREFILL if p <= min(pre.rows[-1], top_tok)] or pre.rows[-1:]:
            out.append((f"prefill P={p}", (0, 0, p, p * p, p, 1)))
    return out


def rows(path: Path) -> list[dict[str, Any]]:
    prof = load_profile(path)
    gpu = get_gpu(prof.gpu)
    out = []
    for lin in prof.linear:
        model = get_model(lin.model)
        perf = {"measured": build_perf_model(f"measured:{path}", model, gpu, lin.tp)}
        perf.update({k: build_perf_model(k, model, gpu, lin.tp) for k in OTHERS})
        for label, shape in shapes(prof):
            row: dict[str, Any] = {"model": lin.model, "tp": lin.tp, "shape": label}
            row.update({k: p.step_seconds(*shape) for k, p in perf.items()})
            out.append(row)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("profile", type=Path)
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    table = rows(a.profile)
    a.out.write_text(json.dumps(table, indent=2))
    print(
        f"{'model':<14} {'shape':<22} {'measured ms':>12} " + " ".join(f"{k:>18}" for k in OTHERS)
    )
    for r in table:
        ratios = " ".join(f"{r[k] / r['measured']:>17.2f}x" for k in OTHERS)
        print(f"{r['model']:<14} {r['shape']:<22} {r['measured'] * 1e3:>12.3f} {ratios}")


if __name__ == "__main__":
    main()
