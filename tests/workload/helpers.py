"""Tiny trace files written by the tests."""

from __future__ import annotations

import gzip
from pathlib import Path

AZURE_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"


def write(path: Path, text: str) -> Path:
    """Write ``text`` to ``path`` (gzip-compressed when the name ends in .gz)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = text.encode()
    path.write_bytes(gzip.compress(data) if path.name.endswith(".gz") else data)
    return path


def azure_rows(rows: list[tuple[str, int, int]]) -> str:
    """Azure CSV text; each row is (time of day 'HH:MM:SS.fffffff', prompt, output)."""
    return AZURE_HEADER + "".join(f"2023-11-16 {t},{p},{o}\n" for t, p, o in rows)


def mooncake_rows(rows: list[tuple[float, int, int]]) -> str:
    """Mooncake JSONL text; each row is (timestamp ms, input_length, output_length)."""
    return "".join(
        f'{{"timestamp": {t}, "input_length": {p}, "output_length": {o}, "hash_ids": [1]}}\n'
        for t, p, o in rows
    )
