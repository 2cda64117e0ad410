"""``tidal serve`` refuses impossible listen addresses and limits with a named error, before
loading a model."""

from __future__ import annotations

import socket

import pytest
from typer.testing import CliRunner

pytest.importorskip("uvicorn")

from tests.api.conftest import _free_port
from tidal.cli import app

pytestmark = pytest.mark.engine


def _serve(*args: str):
    return CliRunner().invoke(app, ["serve", *args])


@pytest.mark.parametrize("port", ["99999", "0", "-1"])
def test_an_impossible_port_is_a_named_error(port):
    """Before: `serve --port 99999` loaded the model, then ended in uvicorn's traceback."""
    r = _serve("--port", port)
    assert r.exit_code == 2
    assert "--port" in r.output
    assert "Traceback" not in r.output
    assert r.exception is None or isinstance(r.exception, SystemExit)


def test_a_port_in_use_is_a_named_error():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        r = _serve("--port", str(s.getsockname()[1]))
    assert r.exit_code == 2
    assert "--host/--port" in r.output
    assert "cannot listen" in r.output


@pytest.mark.parametrize(
    ("flag", "value"), [("--max-body-bytes", "0"), ("--max-streams", "0"), ("--max-queue", "0")]
)
def test_a_limit_below_one_is_a_named_error(flag, value):
    r = _serve(flag, value)
    assert r.exit_code == 2
    assert flag in r.output


def test_an_unresolvable_host_is_a_named_error():
    r = _serve("--host", "no such host.invalid")
    assert r.exit_code == 2
    assert "--host" in r.output


def _serve_captured(monkeypatch, *args: str):
    """``tidal serve ARGS`` up to the point it would run the server: the uvicorn server."""
    import tidal.cli.serve as serve_mod

    seen = {}

    def fake(server, driver):
        seen["server"], seen["driver"] = server, driver
        return 0

    monkeypatch.setattr(serve_mod, "run_supervised", fake)
    r = _serve("--port", str(_free_port()), "--device", "cpu", "--threads", "1", *args)
    return r, seen


def test_vllm_serve_flags_change_the_server(monkeypatch):
    """Before: --max-model-len, --gpu-memory-utilization, --enable-prefix-caching and
    --disable-log-requests were refused as unknown flags."""
    r, seen = _serve_captured(
        monkeypatch,
        "--max-model-len", "300",
        "--no-enable-prefix-caching",
        "--disable-log-requests",
        "--served-model-name", "demo",
        "--num-kv-blocks", "64",
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    driver, server = seen["driver"], seen["server"]
    assert driver.rt.max_model_len == 300
    assert not driver.rt.config.prefix_caching
    assert not driver.scheduler.kv.prefix_caching
    assert driver.scheduler.kv.track_ids
    assert server.config.access_log is False
    assert server.config.app.state.tidal.model_name == "demo"
    assert "byte_tokenizer" in r.output  # where clients find the tokenizer to count with
    r, seen = _serve_captured(monkeypatch, "--num-kv-blocks", "64")
    assert seen["driver"].rt.max_model_len == 64 * 16  # the KV cache bounds the default
    assert type(seen["driver"].scheduler.kv.index).__name__ == "BlockHashIndex"


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (("--max-model-len", "5000"), "max_model_len"),  # beyond tiny-llama's 4096 positions
        (("--max-model-len", "2000", "--num-kv-blocks", "64"), "max_model_len"),  # beyond KV
        (("--gpu-memory-utilization", "0.5"), "gpu_memory_utilization"),  # a CPU engine
        (("--gpu-memory-utilization", "0.5", "--kv-cache-gb", "1"), "gpu_memory_utilization"),
    ],
)
def test_impossible_vllm_serve_flags_are_named_errors(monkeypatch, args, field):
    r, seen = _serve_captured(monkeypatch, *args)
    assert r.exit_code != 0
    assert field in r.output
    assert "Traceback" not in r.output
    assert not seen


def test_kv_budget_by_utilization():
    from tidal.hardware.models import get_model
    from tidal.runtime.config import kv_bytes_for
    from tidal.runtime.model import LlamaConfig

    cfg = LlamaConfig.from_spec(get_model("llama-3.1-8b"))
    gib = 2**30
    kv = kv_bytes_for(0.9, 60 * gib, 80 * gib, 2048, 256, cfg)
    reserve = 2048 * 14336 * 16 + 256 * cfg.vocab_size * 8
    assert kv == 0.9 * 80 * gib - 20 * gib - reserve
    from tidal.core.errors import ConfigError

    with pytest.raises(ConfigError, match="gpu_memory_utilization"):
        kv_bytes_for(0.2, 60 * gib, 80 * gib, 2048, 256, cfg)
