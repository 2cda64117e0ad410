"""The server's front door, a pure ASGI middleware that runs before routing and parsing.

In order, for every HTTP request:

1. **auth**: with an API key set, a protected path without ``Authorization: Bearer KEY`` gets
   401 before a byte of its body is read (constant-time comparison). ``/v1/*`` is always
   protected; ``/metrics``, ``/docs``, ``/redoc`` and ``/openapi.json`` too unless
   ``public_meta`` (for a Prometheus scraper without credentials). ``/health`` is always open:
   liveness probes carry no key.
2. **body size**: a ``Content-Length`` above ``max_body_bytes`` gets 413 without reading; a body
   without one (chunked) is read chunk by chunk and refused with 413 as soon as it passes the
   limit, so memory stays within one limit plus one chunk whatever the client sends. The body
   read is then replayed to the application, and later ``receive`` calls (disconnect
   detection) pass through.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from fastapi.responses import JSONResponse

from tidal.api.errors import error_body

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

_GONE = b"<gone>"  # compared by identity

META_PATHS = ("/metrics", "/docs", "/docs/oauth2-redirect", "/redoc", "/openapi.json")


class Guard:
    def __init__(
        self,
        app: ASGIApp,
        api_key: str | None,
        max_body_bytes: int,
        public_meta: bool = False,
    ) -> None:
        self.app = app
        self.expected = f"Bearer {api_key}".encode() if api_key is not None else None
        self.max_body_bytes = max_body_bytes
        self.public_meta = public_meta

    def protected(self, path: str) -> bool:
        if path.startswith("/v1/") or path == "/v1":
            return True
        return not self.public_meta and path in META_PATHS

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or ())
        if self.expected is not None and self.protected(scope.get("path", "")):
            given = headers.get(b"authorization", b"")
            if not hmac.compare_digest(given, self.expected):
                err = error_body(401, "invalid or missing API key", None, "invalid_api_key")
                await _reply(scope, receive, send, 401, err, {"WWW-Authenticate": "Bearer"})
                return
        length = headers.get(b"content-length")
        if length is not None:
            if not length.isdigit():
                err = error_body(400, "Content-Length: not a number", None, "invalid_request")
                await _reply(scope, receive, send, 400, err)
                return
            if int(length) > self.max_body_bytes:
                await _reply(scope, receive, send, 413, self._too_large())
                return
        if scope.get("method") in ("POST", "PUT", "PATCH"):
            body = await self._read(receive)
            if body is _GONE:  # the client left while sending: nobody to answer
                return
            if body is None:  # over the limit
                await _reply(scope, receive, send, 413, self._too_large())
                return
            receive = _replay(body, receive)
        await self.app(scope, receive, send)

    def _too_large(self) -> dict[str, Any]:
        return error_body(
            413,
            f"the request body exceeds {self.max_body_bytes} bytes (the server's "
            "--max-body-bytes); send a shorter prompt",
            None,
            "request_too_large",
        )

    async def _read(self, receive: Receive) -> bytes | None:
        """The whole body; None as soon as it passes the limit; _GONE if the client left."""
        parts: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # http.disconnect
                return _GONE
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                return None
            parts.append(chunk)
            if not message.get("more_body", False):
                return b"".join(parts)


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replayed() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed


async def _reply(
    scope: Scope,
    receive: Receive,
    send: Send,
    status: int,
    body: dict[str, Any],
    headers: dict[str, str] | None = None,
) -> None:
    h = dict(headers or {})
    h["Connection"] = "close"  # the unread body stays on the socket: do not reuse it
    await JSONResponse(body, status, headers=h)(scope, receive, send)
