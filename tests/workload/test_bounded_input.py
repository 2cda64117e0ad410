"""Bounded input (issue 32 §1): trace files are streamed, gunzipped in chunks and sniffed, and
refused with the limit named as soon as one is passed.

Before: ``_io.read_bytes`` gunzipped the whole file in memory, twice (format detection, then
loading), so a 1 MB ``.csv.gz`` of an Azure header and 1 GiB of NUL bytes took ``tidal
simulate`` to 24 GB RSS and the OOM killer.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import resource
import struct
import subprocess
import sys
import tarfile
import time
import zlib
from pathlib import Path

import numpy as np
import pytest

from tidal.core import bounded
from tidal.core.errors import ConfigError, TraceError
from tidal.workload.servegen_table import read_servegen
from tidal.workload.traces import detect_format, load_azure, load_mooncake, load_trace

AZURE_HEADER = b"TIMESTAMP,ContextTokens,GeneratedTokens\n"
ROW = b"2023-11-16 18:15:46.6805900,374,44\n"


def gzip_bomb(path: Path, header: bytes, mib: int) -> Path:
    """A valid gzip file of ``header`` then ``mib`` MiB of NUL bytes, built in O(1 MiB) work:
    one MiB of zeros is deflated once up to a full flush (byte-aligned, no back references),
    and that block is repeated; the CRC is computed over the zeros chunk by chunk."""
    zeros = bytes(1 << 20)
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    head = c.compress(header) + c.flush(zlib.Z_FULL_FLUSH)
    block = c.compress(zeros) + c.flush(zlib.Z_FULL_FLUSH)
    assert c.compress(zeros) + c.flush(zlib.Z_FULL_FLUSH) == block  # self-contained
    crc = zlib.crc32(header)
    with open(path, "wb") as f:
        f.write(b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff" + head)
        for _ in range(mib):
            f.write(block)
            crc = zlib.crc32(zeros, crc)
        f.write(b"\x03\x00")  # final empty fixed-Huffman block
        f.write(struct.pack("<II", crc, (len(header) + (mib << 20)) & 0xFFFFFFFF))
    return path


def test_the_bomb_builder_makes_a_valid_gzip_file(tmp_path: Path) -> None:
    path = gzip_bomb(tmp_path / "b.csv.gz", AZURE_HEADER, 3)
    data = gzip.decompress(path.read_bytes())
    assert data == AZURE_HEADER + bytes(3 << 20)


_BOMB_SCRIPT = """
import resource, sys, time
t = time.perf_counter()
from tidal.core.errors import TidalError
from tidal.workload.build import build_workload
from tidal.workload.config import WorkloadConfig
import numpy as np
t = time.perf_counter()
try:
    build_workload(WorkloadConfig(trace=sys.argv[1]), np.random.default_rng(0))
    print("LOADED")
except TidalError as err:
    print("REFUSED", err)
print("SECONDS", time.perf_counter() - t)
# the peak of this process image: VmHWM (ru_maxrss survives exec, so it would report the
# pytest process that started this one)
try:
    hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM")][0].split()[1]
except OSError:
    hwm = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print("RSS_MB", int(hwm) / 1024)
"""


def test_a_1mb_gzip_bomb_is_refused_fast_and_small(tmp_path: Path) -> None:
    """Acceptance of issue 32: the 1 MB bomb (valid Azure header, 1 GiB of NUL bytes) is
    refused in under 2 s and under 200 MB RSS (the whole process: Python, numpy, polars)."""
    path = gzip_bomb(tmp_path / "bomb.csv.gz", AZURE_HEADER, 1024)
    assert path.stat().st_size < 1.2e6
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run(
        [sys.executable, "-c", _BOMB_SCRIPT, str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=True,
    ).stdout
    assert "REFUSED" in out, out
    assert "NUL byte" in out or "longer than" in out, out
    fields = dict(line.split(" ", 1) for line in out.splitlines() if line.startswith(("S", "R")))
    assert float(fields["SECONDS"]) < 2.0, out
    assert float(fields["RSS_MB"]) < 200, out


def _filler_bomb(path: Path, filler: bytes, mib: int) -> Path:
    """Like :func:`gzip_bomb` with another filler byte (streamed through zlib, level 9)."""
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = filler * (1 << 20)
    with open(path, "wb") as f:
        f.write(c.compress(AZURE_HEADER))
        for _ in range(mib):
            f.write(c.compress(block))
        f.write(c.flush())
    return path


@pytest.mark.parametrize(
    ("filler", "needle"), [(b" ", "a line longer than"), (b"\n", "expands more than 200×")]
)
def test_bombs_of_spaces_or_blank_lines_are_refused_early(tmp_path, filler, needle) -> None:
    """No NUL byte to stop at: one endless line hits the line limit, blank lines the ratio."""
    path = _filler_bomb(tmp_path / "b.csv.gz", filler, 48)
    t = time.perf_counter()
    with pytest.raises(TraceError, match=needle):
        load_azure(path)
    assert time.perf_counter() - t < 2.0


def test_a_long_line_is_refused_with_the_limit_and_line(tmp_path: Path) -> None:
    body = AZURE_HEADER + ROW + b"x" * (bounded.MAX_LINE_BYTES + 10) + b"\n" + ROW
    path = tmp_path / "long.csv"
    path.write_bytes(body)
    with pytest.raises(TraceError, match=r"line 3: a line longer than 1,048,576 bytes"):
        load_azure(path)


def test_the_text_limit_is_named_and_checked_before_reading(tmp_path, monkeypatch) -> None:
    path = tmp_path / "big.csv"
    path.write_bytes(AZURE_HEADER + ROW * 100)
    monkeypatch.setenv(bounded.ENV_MAX_BYTES, "1000")
    with pytest.raises(TraceError, match=r"more than 1,000 bytes.*TIDAL_MAX_TRACE_BYTES"):
        load_azure(path)
    gz = tmp_path / "big.csv.gz"
    gz.write_bytes(gzip.compress(AZURE_HEADER + ROW * 100))
    with pytest.raises(TraceError, match=r"more than 1,000 bytes"):
        load_azure(gz)
    monkeypatch.setenv(bounded.ENV_MAX_BYTES, "100000")
    assert len(load_azure(gz)) == 100


def test_a_highly_compressed_text_passes_the_ratio_check_only_below_its_floor(
    tmp_path, monkeypatch
) -> None:
    """Real traces compress 3–15×; the ratio limit applies past RATIO_AFTER bytes only."""
    monkeypatch.setattr(bounded, "RATIO_AFTER", 1 << 16)
    path = tmp_path / "rep.csv.gz"
    path.write_bytes(gzip.compress(AZURE_HEADER + ROW * 20_000, 9))
    with pytest.raises(TraceError, match=r"expands more than 200×"):
        load_azure(path)
    monkeypatch.setattr(bounded, "RATIO_AFTER", 32 << 20)
    assert len(load_azure(path)) == 20_000


def test_a_nul_byte_names_its_line(tmp_path: Path) -> None:
    path = tmp_path / "nul.jsonl"
    path.write_bytes(b'{"timestamp": 0, "input_length": 3, "output_length": 1}\n{"t\x00"}\n')
    with pytest.raises(TraceError, match=r"line 2: binary data"):
        load_mooncake(path)


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (b"", "the file is empty"),
        (b"\n  \n", "the file is empty"),
        (b"\xef\xbb\xbf", "the file is empty"),
        (AZURE_HEADER, "a header but no requests"),
        (b"\xef\xbb\xbf" + AZURE_HEADER, "a header but no requests"),
        ("TIMESTAMP,ContextTokens\n".encode("utf-16"), "UTF-16 text"),
        (b"BZh91AY&SY", "bzip2-compressed"),
        (b"\xfd7zXZ\x00\x00", "xz-compressed"),
        (b"PK\x03\x04rest", "zip-compressed"),
        (b"\x00\x01\x02", "binary data"),
    ],
)
def test_empty_bom_header_only_and_binary_files_get_what_they_are(
    tmp_path: Path, content: bytes, needle: str
) -> None:
    """§14: these got "cannot tell the format" or "the workload has no requests (widen the time
    window)"."""
    path = tmp_path / "t.csv"
    path.write_bytes(content)
    with pytest.raises((TraceError, ConfigError), match=needle):
        load_trace(path)


def test_a_bom_prefixed_trace_loads_as_without_it(tmp_path: Path) -> None:
    plain, bom = tmp_path / "a.csv", tmp_path / "b.csv"
    plain.write_bytes(AZURE_HEADER + ROW + ROW)
    bom.write_bytes(b"\xef\xbb\xbf" + AZURE_HEADER + ROW + ROW)
    assert detect_format(bom) == "azure"
    a, b = load_azure(plain), load_azure(bom)
    assert a.arrival_ns.tolist() == b.arrival_ns.tolist()
    line = json.dumps({"timestamp": 5, "input_length": 3, "output_length": 2}).encode()
    m = tmp_path / "m"
    m.write_bytes(b"\xef\xbb\xbf" + line + b"\n")
    assert detect_format(m) == "mooncake"
    assert load_mooncake(m).prompt_len.tolist() == [3]


def test_format_detection_reads_only_the_first_bytes(tmp_path: Path) -> None:
    path = gzip_bomb(tmp_path / "bomb.gz", AZURE_HEADER, 64)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t = time.perf_counter()
    with pytest.raises(TraceError, match="line 2: binary data"):
        detect_format(path)
    assert time.perf_counter() - t < 0.5
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 32 * 1024  # KiB


def test_parquet_and_tar_content_is_detected_whatever_the_name(tmp_path: Path) -> None:
    import polars as pl

    pq = tmp_path / "run.dat"
    pl.DataFrame({"arrival_ns": [0]}).write_parquet(pq)
    assert detect_format(pq) == "measured"
    tar_path = tmp_path / "servegen.bin"
    with tarfile.open(tar_path, "w") as tar:
        data = b"0,1,1,Gamma,1,1\n"
        info = tarfile.TarInfo("language/m/chunk-1-trace.csv")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    assert detect_format(tar_path) == "servegen"


def _servegen_tar(path: Path, members: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_a_truncated_servegen_archive_is_a_named_error(tmp_path: Path) -> None:
    """§13: it printed only "Aborted." (click turns an escaping EOFError into that)."""
    rows = "".join(f"{600 * i},1.5,1,Gamma,1,1\n" for i in range(20_000)).encode()
    full = _servegen_tar(tmp_path / "full.tar.gz", {"language/m/chunk-1-trace.csv": rows})
    cut = tmp_path / "x_trace_csv.tar.gz"
    cut.write_bytes(full.read_bytes()[: full.stat().st_size // 2])
    with pytest.raises(TraceError, match=r"x_trace_csv\.tar\.gz.*truncated"):
        read_servegen(cut)
    junk = tmp_path / "junk_trace_csv.tar.gz"
    junk.write_bytes(b"\x1f\x8b" + bytes(100))
    with pytest.raises(TraceError, match=r"junk_trace_csv\.tar\.gz"):
        read_servegen(junk)


def test_a_servegen_chunk_id_beyond_int64_is_named(tmp_path: Path) -> None:
    """§13: a chunk id over int64 raised OverflowError."""
    big = 2**64
    path = _servegen_tar(
        tmp_path / "s_trace_csv.tar.gz", {f"language/m/chunk-{big}-trace.csv": b"0,1,1,Gamma,1,1\n"}
    )
    with pytest.raises(TraceError, match=rf"chunk-{big}-trace\.csv.*exceeds 2\^63 - 1"):
        read_servegen(path)
    ok = _servegen_tar(
        tmp_path / "t_trace_csv.tar.gz",
        {f"language/m/chunk-{2**63 - 1}-trace.csv": b"0,1,1,Gamma,1,1\n"},
    )
    assert read_servegen(ok).client.tolist() == [2**63 - 1]


def test_a_servegen_member_bomb_is_refused(tmp_path: Path) -> None:
    path = _servegen_tar(
        tmp_path / "b_trace_csv.tar.gz", {"language/m/chunk-1-trace.csv": bytes(8 << 20)}
    )
    with pytest.raises(TraceError, match=r"chunk-1-trace\.csv, line 1: binary data"):
        read_servegen(path)


def test_a_directory_or_unreadable_path_is_named(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="is a directory"):
        bounded.read_bytes(tmp_path)
    with pytest.raises((TraceError, ConfigError)):
        load_azure(tmp_path / "missing.csv")


def test_the_released_traces_pass_the_limits() -> None:
    """Every bundled or shared trace is far inside the limits (no false refusal)."""
    for name in ("AzureLLMInferenceTrace_conv.csv.gz", "conversation_trace.jsonl.gz"):
        try:
            rs = load_trace(name, rng=np.random.default_rng(0))
        except ConfigError as err:  # the shared traces are not on every machine
            pytest.skip(str(err))
        assert len(rs) > 1000


@pytest.mark.parametrize("prefix", ["profile:", "measured:"])
def test_a_profile_that_is_a_directory_binary_or_a_bomb_is_named(tmp_path: Path, prefix) -> None:
    """§13: ``profile:DIR`` raised IsADirectoryError; a gzip profile was gunzipped whole."""
    from tidal.hardware.calibration import check_perf_model

    binary = tmp_path / "p.bin"
    binary.write_bytes(b"\x00\x01")
    bomb = gzip_bomb(tmp_path / "p.json.gz", b"{", 64)
    for path, needle in ((tmp_path, "is a directory"), (binary, "binary data"), (bomb, "NUL")):
        with pytest.raises(ConfigError, match=needle):
            check_perf_model(f"{prefix}{path}")


def test_a_sharegpt_dataset_is_read_bounded_and_odd_turns_are_skipped(tmp_path: Path) -> None:
    """``bench serve --dataset-path``: a directory, a bomb, or a turn that is no object was a
    traceback (IsADirectoryError, a whole gunzip, AttributeError)."""
    from tidal.measure.dataset import sharegpt_requests

    rng = np.random.default_rng(0)
    for path in (tmp_path, gzip_bomb(tmp_path / "d.json.gz", b"[", 64)):
        with pytest.raises(ConfigError, match="dataset-path"):
            sharegpt_requests(path, 3, rng, None)
    good = {"conversations": [{"value": "hello there"}, {"value": "hi, how can I help"}]}
    path = tmp_path / "d.json"
    path.write_text(json.dumps([{"conversations": ["x", 3]}, good]))
    reqs = sharegpt_requests(path, 3, rng, None)
    assert [r.prompt for r in reqs] == ["hello there"]
