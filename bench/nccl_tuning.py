"""Does NCCL's own tuning model predict where the profiles' fast all-reduce regime ends?
(issue 13: the strict A100 → H100 evaluation's two worst cells, H100 TP 2 decode at batch 1–2.)

NCCL picks, per collective and message size S, the (algorithm, protocol) of least predicted
time ``lat + S/(1000·bw)`` µs (bw in GB/s). For a ring all-reduce on one node of ``tp`` GPUs
(nsteps = 2(tp−1), algorithm bandwidth = bus bandwidth · tp/nsteps):

* latency  ``base[p] + nsteps·hw_nvlink[p]``; NVLS (NVLink SHARP, SM90 with NVSwitch, Simple
  only) ``base_nvls`` flat;
* bus bandwidth ``B = links·per_link`` (the ring graph's nChannels·bwIntra at best), then
  LL ``min(ll_max[arch], B·ll_factor)``, LL128 ``min(0.92·B, nCh·ll128_per_ch[arch])``,
  Simple ``B``, NVLS ``≈ B`` (not limiting below a megabyte).

Constants (data, not code): NVIDIA/nccl ``src/graph/tuning.cc`` and ``src/graph/topo.h``,
tag v2.18.3-1 (BSD-3-Clause; the NCCL of the torch releases Vidur profiled with) and, where
noted, the 2026 head (Apache-2.0: Hopper's LL cap 141 GB/s, LL factor 1/2, NVLS 25 µs).
Link counts: A100 SXM 12 NVLink-3 links, H100 SXM 18 NVLink-4 links (20 GB/s each in NCCL).

The script prints (1) NCCL's predicted protocol switch points on SM80 and SM90, (2) the measured
sweeps' levels beside NCCL's predicted times, by size band, and (3) the strict A100 → H100
step errors with the all-reduce regimes moved by NCCL's prediction (no H100 data fitted).

    python bench/nccl_tuning.py
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import md_table, save
from roofline_fit import fit_all
from step_accuracy import evaluate_deployment, heads

from tidal.hardware.allreduce import LinkConst
from tidal.hardware.models import get_model
from tidal.hardware.opprofile import bundled_profiles, deployment

BASE_US = {"LL": 6.6, "LL128": 14.0, "Simple": 8.4}
"""Ring base latency per protocol (tuning.cc ``baseLat``, v2.18.3 and head alike)."""
HW_NVLINK_US = {"LL": 0.6, "LL128": 1.9, "Simple": 3.4}
"""Ring per-step NVLink latency per protocol (tuning.cc ``hwLat[NVLINK]``)."""
ARCH: dict[str, dict[str, dict[str, float]]] = {
    "v2.18.3": {
        "sm80": {"ll_max": 87.7, "ll128_ch": 20.0, "links": 12, "link_gbs": 20.0},
        "sm90": {"ll_max": 87.7, "ll128_ch": 36.7, "links": 18, "link_gbs": 20.0,
                 "nvls_us": 23.0},
    },
    "head": {
        "sm80": {"ll_max": 87.7, "ll128_ch": 20.0, "links": 12, "link_gbs": 20.0},
        "sm90": {"ll_max": 141.0, "ll128_ch": 36.7, "links": 18, "link_gbs": 20.6,
                 "nvls_us": 25.0},
    },
}  # fmt: skip
LL_FACTOR = {"v2.18.3": 0.25, "head": 0.5}
"""Ring LL bandwidth as a fraction of the bus bandwidth for all-reduce (tuning.cc)."""
GPU_ARCH = {"a100-80gb": "sm80", "h100": "sm90"}


def protocol_times(version: str, arch: str, tp: int, nbytes: float) -> dict[str, float]:
    """NCCL's predicted µs of one ring all-reduce of ``nbytes`` per protocol (module doc)."""
    a = ARCH[version][arch]
    nsteps = 2 * (tp - 1)
    ratio = tp / nsteps
    bus = a["links"] * a["link_gbs"]
    nch = a["links"]
    bws = {"LL": min(a["ll_max"], bus * LL_FACTOR[version]),
           "LL128": min(0.92 * bus, nch * a["ll128_ch"]), "Simple": bus}  # fmt: skip
    out = {p: BASE_US[p] + nsteps * HW_NVLINK_US[p] + nbytes / (1000.0 * bw * ratio)
           for p, bw in bws.items()}  # fmt: skip
    if "nvls_us" in a:
        out["NVLS"] = a["nvls_us"] + nbytes / (1000.0 * bus * ratio)
    return out


def switch_points(version: str, arch: str, tp: int) -> list[tuple[int, str, float]]:
    """(first size, protocol, µs) wherever NCCL's choice changes, sizes 1 KiB–64 MiB in
    steps of 2^(1/8)."""
    out: list[tuple[int, str, float]] = []
    for k in range(80, 209):
        s = int(2 ** (k / 8))
        t = protocol_times(version, arch, tp, s)
        best = min(t, key=lambda p: t[p])
        if not out or out[-1][1] != best:
            out.append((s, best, round(t[best], 1)))
    return out


def sweep_levels() -> list[list[Any]]:
    """Per DGX sweep (GPU, TP) and size band: the measured median µs (min–max) beside NCCL's
    predicted µs (its best protocol's) over the band."""
    rows = []
    bands = [(0, 30_000), (30_000, 300_000), (300_000, 3_000_000)]
    for prof in bundled_profiles():
        arch = GPU_ARCH.get(prof.gpu)
        if arch is None:
            continue
        for ar in prof.all_reduce:
            if ar.link != "dgx":
                continue
            cells: list[Any] = [f"{prof.gpu} TP {ar.tp}"]
            for lo, hi in bands:
                pts = [(b, u) for b, u in zip(ar.bytes, ar.us, strict=True) if lo < b <= hi]
                us = [u for _, u in pts]
                pred = [min(protocol_times("v2.18.3", arch, ar.tp, b).values()) for b, _ in pts]
                cells.append(f"{statistics.median(us):.0f} ({min(us):.0f}–{max(us):.0f}) · "
                             f"NCCL {min(pred):.0f}–{max(pred):.0f}")  # fmt: skip
            rows.append(cells)
    return rows


def variants(strict: Any) -> dict[str, Any]:
    """H100 DGX link constants derived from A100's fit and NCCL's model (no H100 data):
    ``ratio``: A100's regime boundaries × NCCL's predicted H100/A100 first-switch ratio;
    ``nccl``: NCCL's predicted LL time (latency + LL bandwidth) for every size."""
    out = {"strict": strict}
    ratio, nccl = strict.model_copy(deep=True), strict.model_copy(deep=True)
    for tp in (2, 4, 8):
        lc = strict.link.get(f"a100-80gb/dgx/tp{tp}")
        if lc is None:
            continue
        r = switch_points("v2.18.3", "sm90", tp)[1][0] / switch_points("v2.18.3", "sm80", tp)[1][0]
        moved = lc.model_copy(update={"ll_bytes": lc.ll_bytes * r, "mid_bytes": lc.mid_bytes * r})
        ratio.link[f"h100/dgx/tp{tp}"] = moved.scaled(300 / 450)
        a = ARCH["v2.18.3"]["sm90"]
        bus = a["links"] * a["link_gbs"] * 1e9
        eta_ll = min(a["ll_max"] * 1e9, bus * LL_FACTOR["v2.18.3"]) / bus
        lat = BASE_US["LL"] + 2 * (tp - 1) * HW_NVLINK_US["LL"]
        nccl.link[f"h100/dgx/tp{tp}"] = LinkConst(lat_us=lat, eta=eta_ll)
    return out | {"ratio": ratio, "nccl": nccl}


def strict_errors() -> tuple[list[list[Any]], dict[str, Any]]:
    profiles = bundled_profiles()
    strict = fit_all([p for p in profiles if p.gpu == "a100-80gb"], m_tile=128, p_by="nk")
    strict.link_borrowed = {}  # A100's own fits, as this study ran (before session 24's R1)
    strict.family = {"h100": "a100-80gb", **strict.family}
    vs = variants(strict)
    rows: list[dict[str, Any]] = []
    for prof in profiles:
        if prof.gpu != "h100":
            continue
        for lin in prof.linear:
            model = get_model(lin.model)
            dep = deployment(prof.gpu, lin.model, lin.tp, (prof,), heads(model))
            assert dep is not None
            rows += evaluate_deployment(prof, dep, model, {"corrected_lomo": strict, **vs})
    table, res = [], {}
    for col in vs:
        worst = max(rows, key=lambda r, c=col: r[c][1])  # type: ignore[misc]
        over = sum(1 for r in rows if r[col][1] > 0.25)
        med = statistics.median(r[col][0] for r in rows)
        table.append([col, f"{100 * med:.1f} %", f"{100 * worst[col][1]:.1f} %",
                      f"{worst['deployment']} {worst['class']} {worst[col + '_worst_shape']}",
                      f"{over} / {len(rows)}"])  # fmt: skip
        res[col] = {"median": med, "worst": worst[col][1], "cells_over_25": over}
    return table, res


def main() -> None:
    sw = []
    for version in ARCH:
        for arch in ("sm80", "sm90"):
            for tp in (2, 4, 8):
                pts = switch_points(version, arch, tp)
                sw.append([version, arch, tp, " → ".join(f"{p} {us} µs @ {s} B"
                                                         for s, p, us in pts)])  # fmt: skip
    print("NCCL's predicted protocol (ring all-reduce, one NVLink node) by message size")
    print(md_table(["NCCL", "arch", "TP", "protocol from size"], sw))
    ff = sweep_levels()
    print("\nmeasured DGX sweeps, µs: median (min–max) · NCCL's predicted, by size band")
    print(md_table(["sweep", "≤ 30 KB", "30–300 KB", "0.3–3 MB"], ff))
    table, res = strict_errors()
    print("\nstrict A100 → H100 (median of per-(deployment, class) medians / worst / cells > 25 %)")
    print(md_table(["H100 DGX all-reduce", "median", "worst", "worst cell", "> 25 %"], table))
    save("nccl_tuning", {"switch_points": sw, "sweep_levels": ff, "strict": res})


if __name__ == "__main__":
    main()
