"""``tidal serve`` refuses impossible listen addresses and limits with a named error, before
loading a model."""

from __future__ import annotations

import socket

import pytest
from typer.testing import CliRunner

pytest.importorskip("uvicorn")

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
