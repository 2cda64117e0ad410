"""``cluster.models`` entries as YAML mappings, and the per-model speculative configs they
carry (docs/design/disagg-cluster-composition.md §B, §C).

A mapping entry is the long form of ``id[:tp][:PpDd]`` / ``id:TPp/TPd:PpDd``::

    models:
      - {model: llama-2-7b, prefill: 2, decode: 1, prefill_tp: 1, decode_tp: 2}
      - {model: llama-2-13b, tp: 2, speculative_config: {method: ngram, num_speculative_tokens: 3}}

It is turned into the compact string (so a list of strings, and every existing config, is read
exactly as before); its ``speculative_config`` moves to ``cluster.speculative`` under the
entry's name in results (``id``, or ``id#k`` when the id repeats).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

_KEYS = {"model", "id", "tp", "prefill", "decode", "prefill_tp", "decode_tp",
         "speculative_config", "speculative"}  # fmt: skip


def entry_names(entries: list[str]) -> list[str]:
    """Each entry's name in results: its id, ``id#k`` (k-th of that id) when the id repeats."""
    ids = [e.split(":")[0].strip() for e in entries]
    counts, seen = Counter(ids), Counter[str]()
    out = []
    for mid in ids:
        out.append(f"{mid}#{seen[mid]}" if counts[mid] > 1 else mid)
        seen[mid] += 1
    return out


def _compact(i: int, d: dict[str, Any]) -> str:
    """The string form of mapping entry ``i``."""
    where = f"cluster.models[{i}]"
    bad = sorted(set(d) - _KEYS)
    if bad:
        raise ValueError(f"{where}: unknown keys {bad} (valid: {', '.join(sorted(_KEYS))})")
    mid = d.get("model", d.get("id"))
    if not isinstance(mid, str) or not mid:
        raise ValueError(f"{where}: give the model id as 'model: <id>'")
    p, dd = int(d.get("prefill", 0)), int(d.get("decode", 0))
    if (p > 0) != (dd > 0):
        raise ValueError(f"{where}: a disaggregated unit needs both 'prefill' and 'decode' ≥ 1")
    tp, tp_p, tp_d = d.get("tp"), d.get("prefill_tp"), d.get("decode_tp")
    if (tp_p is not None or tp_d is not None) and not p:
        raise ValueError(f"{where}: prefill_tp / decode_tp need 'prefill' and 'decode' engines")
    if tp_p is not None or tp_d is not None:
        base: Any = tp if tp is not None else (tp_d if tp_d is not None else tp_p)
        tp_s = f"{int(base if tp_p is None else tp_p)}/{int(base if tp_d is None else tp_d)}"
    else:
        tp_s = "" if tp is None else str(int(tp))
    parts = [mid] + ([tp_s] if tp_s else []) + ([f"{p}p{dd}d"] if p else [])
    return ":".join(parts)


def split_entries(v: Any) -> tuple[Any, dict[str, Any]]:
    """(``models`` as strings, the mapping entries' speculative configs by name)."""
    if isinstance(v, str):
        return [s.strip() for s in v.split(",") if s.strip()], {}
    if not isinstance(v, list):
        return v, {}
    out = [_compact(i, e) if isinstance(e, dict) else e for i, e in enumerate(v)]
    if not all(isinstance(e, str) for e in out):
        return out, {}
    names = entry_names(out)
    spec = {}
    for i, e in enumerate(v):
        if isinstance(e, dict):
            s = e.get("speculative_config", e.get("speculative"))
            if s is not None:
                spec[names[i]] = s
    return out, spec
