"""Bounded reading of input files: streamed in chunks, gunzipped in chunks, sniffed by content.

Every text input (trace CSV, JSON Lines, a ServeGen tar member; profiles, without the line
limit) goes through :func:`read_stream`,
which holds at most the accepted text in memory and refuses, with :class:`TraceError` naming the
limit, as soon as one is passed:

- :data:`MAX_INPUT_BYTES` of (decompressed) text, also checked against a plain file's size
  before its first byte is read; ``TIDAL_MAX_TRACE_BYTES`` raises it;
- :data:`MAX_LINE_BYTES` in one line (a record of any supported format is far shorter);
- :data:`MAX_RATIO` decompressed bytes per compressed byte once :data:`RATIO_AFTER` bytes are
  out (text traces compress 3–15×; a gzip bomb of NUL bytes about 1000×);
- a NUL byte (binary data is no text trace), with its physical line.

So a 1 MB ``.csv.gz`` that expands to 1 GiB is refused after reading one MiB of it. A UTF-8
byte-order mark is dropped; UTF-16 text, and data compressed with something other than gzip,
are refused with the fix. :func:`sniff` returns the first bytes (decompressed) for format
detection without reading the rest.
"""

from __future__ import annotations

import gzip
import os
import zlib
from pathlib import Path
from typing import BinaryIO

from tidal.core.errors import TraceError

CHUNK_BYTES = 1 << 20
MAX_INPUT_BYTES = 1 << 30
"""Largest text accepted from one file (1 GiB, decompressed): the loaders hold it, then
polars' string columns, in memory. The released traces are below 100 MB."""
ENV_MAX_BYTES = "TIDAL_MAX_TRACE_BYTES"
MAX_LINE_BYTES = 1 << 20
"""Longest accepted line (1 MiB; a Mooncake record of a 128k-token prompt is about 2 KB)."""
MAX_RATIO = 200
RATIO_AFTER = 32 << 20
GZIP_MAGIC = b"\x1f\x8b"
PARQUET_MAGIC = b"PAR1"
_BOMS = {b"\xef\xbb\xbf": "utf-8"}
_UTF16 = (b"\xff\xfe", b"\xfe\xff")
_OTHER_COMPRESSION = {
    b"BZh": "bzip2",
    b"\xfd7zXZ\x00": "xz",
    b"\x28\xb5\x2f\xfd": "zstd",
    b"PK\x03\x04": "zip",
    b"7z\xbc\xaf\x27\x1c": "7z",
}


def max_input_bytes() -> int:
    """:data:`MAX_INPUT_BYTES`, or ``TIDAL_MAX_TRACE_BYTES`` when set to a positive integer."""
    raw = os.environ.get(ENV_MAX_BYTES, "").strip()
    if raw.isdigit() and int(raw) > 0:
        return int(raw)
    return MAX_INPUT_BYTES


def _too_big(where: str, limit: int, what: str) -> TraceError:
    return TraceError(
        where,
        None,
        None,
        f"{what} more than {limit:,} bytes of text, the limit of one trace file "
        f"(set {ENV_MAX_BYTES} to raise it, or select a part of the file)",
    )


def check_magic(head: bytes, where: str) -> None:
    """Refuse content that is no text trace and no gzip, tar or Parquet file, from its first
    bytes: other compressions, UTF-16 text."""
    for magic, name in _OTHER_COMPRESSION.items():
        if head.startswith(magic):
            raise TraceError(
                where, None, None, f"{name}-compressed data: only gzip is read (decompress it)"
            )
    if head.startswith(_UTF16):
        raise TraceError(where, None, None, "UTF-16 text: save the file as UTF-8")


class _LineGuard:
    """Running state of the checks of :func:`read_stream` (bytes since the last newline, lines
    so far, text so far)."""

    def __init__(self, where: str, limit: int, max_line: int | None) -> None:
        self.where, self.limit, self.max_line = where, limit, max_line
        self.total = self.newlines = self.open_line = 0

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        if self.total > self.limit:
            raise _too_big(self.where, self.limit, "it holds")
        nul = chunk.find(b"\0")
        if nul >= 0:
            line = self.newlines + chunk.count(b"\n", 0, nul) + 1
            raise TraceError(self.where, line, None, "binary data (a NUL byte): not a text file")
        first = chunk.find(b"\n")
        if first < 0:
            self.open_line += len(chunk)
        else:
            # a chunk is no longer than the line limit, so an over-long line spans chunks
            # (unless it is the first line of the chunk, checked here with what came before)
            self._check(self.open_line + first, self.newlines + 1)
            self.newlines += chunk.count(b"\n")
            self.open_line = len(chunk) - chunk.rfind(b"\n") - 1
        self._check(self.open_line, self.newlines + 1)

    def _check(self, length: int, line: int) -> None:
        if self.max_line is not None and length > self.max_line:
            raise TraceError(
                self.where,
                line,
                None,
                f"a line longer than {self.max_line:,} bytes, the limit of one record "
                "(is this a trace file?)",
            )


def read_stream(
    stream: BinaryIO,
    where: str,
    compressed: BinaryIO | None = None,
    limit: int | None = None,
    max_line: int | None = MAX_LINE_BYTES,
) -> bytes:
    """All of ``stream``, read in chunks under the module's limits (``compressed``: the file a
    gzip stream reads, whose position gives the compression ratio; ``max_line`` None for a
    document that may be one long line, e.g. JSON). A leading UTF-8 BOM is dropped."""
    limit = max_input_bytes() if limit is None else limit
    guard = _LineGuard(where, limit, max_line)
    parts: list[bytes] = []
    while True:
        try:
            chunk = stream.read(CHUNK_BYTES)
        except (OSError, EOFError, zlib.error) as exc:
            raise TraceError(where, None, None, f"corrupt or truncated gzip data: {exc}") from None
        if not chunk:
            break
        if not parts:
            chunk = _drop_bom(chunk, where)
        guard.feed(chunk)
        if compressed is not None and guard.total > RATIO_AFTER:
            ratio = guard.total / max(compressed.tell(), 1)
            if ratio > MAX_RATIO:
                raise TraceError(
                    where,
                    None,
                    None,
                    f"gzip data expands more than {MAX_RATIO}× (a decompression bomb?); "
                    "decompress it yourself and give the plain file",
                )
        parts.append(chunk)
    return b"".join(parts)


def _drop_bom(chunk: bytes, where: str) -> bytes:
    check_magic(chunk[:8], where)
    for bom in _BOMS:
        if chunk.startswith(bom):
            return chunk[len(bom) :]
    return chunk


def _open(path: Path, where: str) -> BinaryIO:
    if path.is_dir():
        raise TraceError(where, None, None, "is a directory, not a file")
    try:
        return open(path, "rb")
    except OSError as exc:
        raise TraceError(where, None, None, f"cannot read it: {exc.strerror}") from None


def read_bytes(
    path: Path, where: str | None = None, max_line: int | None = MAX_LINE_BYTES
) -> bytes:
    """The file's text, gunzipped when it starts with the gzip magic number, under the limits
    of :func:`read_stream` (a plain file's size is checked before reading)."""
    where = str(path) if where is None else where
    limit = max_input_bytes()
    with _open(Path(path), where) as f:
        if f.read(2) == GZIP_MAGIC:
            f.seek(0)
            with gzip.GzipFile(fileobj=f, mode="rb") as gz:
                return read_stream(gz, where, f, limit, max_line)  # type: ignore[arg-type]
        f.seek(0)
        if os.fstat(f.fileno()).st_size > limit:
            raise _too_big(where, limit, "it holds")
        return read_stream(f, where, limit=limit, max_line=max_line)


def sniff(path: Path, size: int = 65536) -> bytes:
    """At most ``size`` first bytes of the file's content (decompressed when gzip): for format
    detection, never the whole file. A leading UTF-8 BOM is dropped."""
    where = str(path)
    with _open(path, where) as f:
        head = f.read(size)
        if head[:2] != GZIP_MAGIC:
            return _drop_bom(head, where)
        f.seek(0)
        try:
            with gzip.GzipFile(fileobj=f, mode="rb") as gz:
                data = gz.read(size)
        except (OSError, EOFError, zlib.error) as exc:
            raise TraceError(where, None, None, f"corrupt or truncated gzip data: {exc}") from None
        return _drop_bom(data, where)
