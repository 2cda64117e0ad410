"""Measured operator tables of current serving engines (the ``aiconfigurator-core`` package).

NVIDIA's AIConfigurator core (Apache-2.0; facts in ``docs/research/engine-data.md``) ships, per
GPU system, per engine (``vllm``, ``sglang``) and per engine version, the latency in
milliseconds of the operators a forward pass is made of, measured with that engine's kernels:
``<root>/systems/data/<system>/<op>/<engine>/<version>/*.parquet``. Tidal reads these files
(with polars) and never imports the package's code.

Version resolution (:func:`resolve_versions`, rule :data:`VERSION_RULE`): the requested engine
version, else the newest version with any table for the GPU; each operator family then uses
that version's own table where the version has one, else the family's **newest** table (as a
``nightly-<build>`` and the default version do). The versions actually read are recorded per
family (``summary.json``'s ``perf_model_tables``, with the rule). Measured reason (BENCHMARKS.md,
issue 28, "version fallback"): the earlier rule, the nearest version per family (newest older,
else oldest newer), made vLLM 0.15.1's gpt-oss rows on B200 read 0.19.0's slower MXFP4 MoE
rows (TPOT 3.7× the measured value); the newest tables give them 24 %, and over the 864 silicon
rows the two rules read differently the rows off by 2× in TPOT fall from 106 to 37
(docs/research/engine-data.md, "Version rule").
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import polars as pl

from tidal.core.errors import ConfigError

PACKAGE = "aiconfigurator-core"
PACKAGE_VERSION = "0.12.0"
"""The pinned version (pyproject.toml); :func:`package_version` reports the installed one."""
ENGINES = ("vllm", "sglang")
FAMILIES = {
    "gemm": ("gemm_perf.parquet",),
    "attention": ("context_attention_perf.parquet", "generation_attention_perf.parquet"),
    "moe": ("moe_perf.parquet",),
    "comm": ("custom_allreduce_perf.parquet",),
}
"""Operator family → the files Tidal reads from its directory."""
VERSION_RULE = "own tables of the version, else the newest"
"""How a family's version is chosen (:func:`_pick`); ``summary.json`` records it."""


def _module_dir() -> Path | None:
    spec = importlib.util.find_spec("aiconfigurator_core")  # locates, does not import
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


@lru_cache(maxsize=1)
def data_root() -> Path:
    """``<package>/systems``; a ConfigError naming the install command when it is missing."""
    mod = _module_dir()
    if mod is None or not (mod / "systems" / "data").is_dir():
        raise ConfigError(
            "perf_model",
            f"the measured engine tables need the {PACKAGE} package",
            f"pip install '{PACKAGE}=={PACKAGE_VERSION}' (a dependency of tidal), or use "
            "--perf-model corrected-roofline",
        )
    return mod / "systems"


def package_version() -> str:
    try:
        return importlib.metadata.version(PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def version_key(v: str) -> tuple[tuple[int, int | str], ...]:
    """Orders engine versions numerically: ``0.5.6.post2`` < ``0.5.9`` < ``0.5.14``."""
    parts = re.split(r"[.\-+]", v)
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in parts)


def systems() -> list[str]:
    """GPU systems with any vLLM or SGLang GEMM table."""
    root = data_root() / "data"
    return sorted(
        p.name for p in root.iterdir() if any((p / "gemm" / e).is_dir() for e in ENGINES)
    )


def versions(system: str, family: str, engine: str) -> list[str]:
    """Versions of ``engine`` holding the files of ``family`` for ``system``, oldest first."""
    d = data_root() / "data" / system / family / engine
    if not d.is_dir():
        return []
    files = FAMILIES[family]
    have = [v.name for v in d.iterdir() if any((v / f).is_file() for f in files)]
    return sorted(have, key=version_key)


def engine_versions(system: str, engine: str) -> list[str]:
    """The versions a user may ask for: those holding any operator family's tables."""
    have = {v for f in FAMILIES for v in versions(system, f, engine)}
    return sorted(have, key=version_key)


@dataclass(frozen=True)
class TableSet:
    """Which version of each operator family one deployment reads."""

    system: str
    engine: str
    version: str
    families: tuple[tuple[str, str], ...] = ()
    """(family, version actually read) pairs; a family without a table is absent."""

    def family_version(self, family: str) -> str | None:
        return dict(self.families).get(family)

    def path(self, family: str, name: str) -> Path | None:
        v = self.family_version(family)
        if v is None:
            return None
        p = data_root() / "data" / self.system / family / self.engine / v / name
        return p if p.is_file() else None

    def describe(self) -> dict[str, object]:
        return {
            "data_source": f"{PACKAGE} {package_version()}",
            "engine": self.engine,
            "engine_version": self.version,
            "gpu_tables": self.system,
            "tables": dict(self.families),
            "exact": all(v == self.version for _, v in self.families),
            "version_rule": VERSION_RULE,
        }


def fallbacks(ts: TableSet, family: str) -> list[TableSet]:
    """``ts`` and then the same tables with ``family`` read from each other version holding
    it, nearest first (older before newer): where the chosen version's table lacks a shape
    (vLLM 0.19's MoE rows of gpt-oss), another version's measurement of it is used."""
    have = versions(ts.system, family, ts.engine)
    cur = ts.family_version(family)
    if cur is None:
        return [ts]
    key = version_key(cur)
    older = [v for v in reversed(have) if version_key(v) < key]
    newer = [v for v in have if version_key(v) > key]
    out = [ts]
    for v in older + newer:
        fams = tuple((f, v if f == family else w) for f, w in ts.families)
        out.append(TableSet(ts.system, ts.engine, ts.version, fams))
    return out


def _pick(have: list[str], want: str) -> str | None:
    """``want`` if it holds the family's table, else the newest version that does (module
    docstring: a version's own measurement, never a neighbour's older or newer kernels)."""
    if not have:
        return None
    return want if want in have else have[-1]


@lru_cache(maxsize=64)
def resolve_versions(system: str, engine: str, version: str | None = None) -> TableSet:
    """The tables of (GPU system, engine, version); see the module docstring."""
    if engine not in ENGINES:
        raise ConfigError("engine", f"unknown engine {engine!r}", f"use one of {ENGINES}")
    have = engine_versions(system, engine)
    if not versions(system, "gemm", engine):
        raise ConfigError(
            "gpu",
            f"no {engine} operator tables for {system} in {PACKAGE}",
            "GPUs with tables: " + ", ".join(systems()),
        )
    if version is None:
        version = have[-1]
    nightly = re.fullmatch(r"nightly[-.\w]*", version) is not None
    if not nightly and not re.fullmatch(r"\d+(\.\d+)*([.\-+]?[A-Za-z0-9]+)*", version):
        raise ConfigError(
            "engine_version",
            f"{version!r} is not an engine version",
            "versions with data: " + ", ".join(have) + ", or nightly-<build> (the newest tables)",
        )
    want = have[-1] if nightly else version  # a nightly build is newer than every release
    fams = tuple((f, v) for f in FAMILIES if (v := _pick(versions(system, f, engine), want)))
    return TableSet(system, engine, version, fams)


@lru_cache(maxsize=32)
def read_table(path: Path) -> pl.DataFrame:
    """One parquet table, read once per process (the tables are immutable package data)."""
    return pl.read_parquet(path)


def table(ts: TableSet, family: str, name: str) -> pl.DataFrame | None:
    p = ts.path(family, name)
    return None if p is None else read_table(p)


def nccl_table(system: str) -> pl.DataFrame | None:
    """``comm/nccl/<version>/nccl_perf.parquet`` of the NCCL version the GPU's system file
    names (``misc.nccl_version``), else the newest with data."""
    d = data_root() / "data" / system / "comm" / "nccl"
    if not d.is_dir():
        return None
    have = sorted((v.name for v in d.iterdir() if (v / "nccl_perf.parquet").is_file()),
                  key=version_key)  # fmt: skip
    if not have:
        return None
    want = None
    spec = data_root() / f"{system}.yaml"
    if spec.is_file():
        m = re.search(r"nccl_version:\s*'?([0-9.]+)", spec.read_text())
        want = m.group(1) if m else None
    v = want if want in have else have[-1]
    return read_table(d / v / "nccl_perf.parquet")
