"""A live ``tidal serve`` on 127.0.0.1 (uvicorn in a thread, a free port) for API tests."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pytest

pytest.importorskip("torch")
pytest.importorskip("fastapi")
uvicorn = pytest.importorskip("uvicorn")

from starlette.testclient import TestClient  # noqa: E402

from tidal.api.app import create_app  # noqa: E402
from tidal.runtime.config import RuntimeConfig, build_engine  # noqa: E402
from tidal.runtime.driver import EngineDriver  # noqa: E402


@dataclass
class LiveServer:
    url: str
    driver: EngineDriver
    server: object

    @property
    def base_url(self) -> str:
        return self.url + "/v1"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(
    api_key: str | None = None, max_queue: int = 1024, app_kw: dict | None = None, **runtime_kw
) -> tuple[LiveServer, threading.Thread]:
    runtime_kw.setdefault("num_kv_blocks", 2048)
    runtime_kw.setdefault("num_threads", 1)
    driver = EngineDriver(build_engine(RuntimeConfig(**runtime_kw)))
    app = create_app(driver, "tiny-llama", api_key=api_key, max_queue=max_queue, **(app_kw or {}))
    port = _free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error", lifespan="on")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the test server did not start")
        time.sleep(0.02)
    return LiveServer(f"http://127.0.0.1:{port}", driver, server), thread


def stop_server(live: LiveServer, thread: threading.Thread) -> None:
    live.server.should_exit = True  # type: ignore[attr-defined]
    thread.join(timeout=30)


@pytest.fixture(scope="module")
def live() -> Iterator[LiveServer]:
    srv, thread = start_server()
    yield srv
    stop_server(srv, thread)


def wait_idle(driver: EngineDriver, timeout: float = 20.0) -> None:
    """Until the engine holds no request and every KV block is free."""
    deadline = time.monotonic() + timeout
    kv = driver.scheduler.kv
    while driver.handles or driver.scheduler.has_work() or kv.num_free_blocks != kv.num_blocks:
        if time.monotonic() > deadline:
            raise AssertionError(
                f"engine not idle: {len(driver.handles)} handles, "
                f"{kv.num_blocks - kv.num_free_blocks} blocks used"
            )
        time.sleep(0.01)


@contextmanager
def in_process(
    app_kw: dict | None = None, **runtime_kw
) -> Iterator[tuple[TestClient, EngineDriver]]:
    """The app in this process (Starlette's TestClient: ASGI calls, no socket)."""
    runtime_kw.setdefault("num_kv_blocks", 256)
    runtime_kw.setdefault("num_threads", 1)
    driver = EngineDriver(build_engine(RuntimeConfig(**runtime_kw)))
    app = create_app(driver, "tiny-llama", **(app_kw or {}))
    with TestClient(app, raise_server_exceptions=False) as client:
        yield client, driver


def metric(text: str, name: str) -> float:
    """The value of one sample line of a Prometheus text exposition (0 if absent)."""
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0
