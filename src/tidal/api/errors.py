"""OpenAI-style errors: ``{"error": {"message", "type", "param", "code"}}`` with a 4xx/5xx."""

from __future__ import annotations

from typing import Any

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
    500: "server_error",
    503: "server_error",
}


class APIError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code
        self.headers = headers


def error_body(
    status: int, message: str, param: str | None = None, code: str | None = None
) -> dict[str, Any]:
    return {
        "error": {
            "message": _printable(message),
            "type": _TYPES.get(status, "invalid_request_error"),
            "param": param,
            "code": code,
        }
    }


def _printable(text: str) -> str:
    """``text`` with any lone surrogate escaped, so the reply encodes as UTF-8 JSON."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def error_response(err: APIError) -> JSONResponse:
    body = error_body(err.status, err.message, err.param, err.code)
    return JSONResponse(body, err.status, headers=err.headers)


async def _api_error(_: Request, err: Exception) -> JSONResponse:
    assert isinstance(err, APIError)
    return error_response(err)


def _type_tag(part: str) -> bool:
    """A union member's tag in an error location (``str``, ``list[int]``), not a field."""
    return part in ("str", "int", "float", "bool", "list", "dict") or "[" in part


async def _validation_error(_: Request, err: Exception) -> JSONResponse:
    """Malformed JSON or a body that breaks the schema: 400 naming the first bad field."""
    assert isinstance(err, RequestValidationError)
    problems = []
    param = None
    for e in err.errors():
        loc = [str(p) for p in e.get("loc", ()) if p != "body" and not _type_tag(str(p))]
        where = ".".join(loc)
        msg = str(e.get("msg", "invalid")).removeprefix("Value error, ")
        if not where and e.get("type") in ("json_invalid", "model_attributes_type", "dict_type"):
            msg = f"the request body must be a JSON object ({msg})"
        problem = f"{where}: {msg}" if where else msg
        if problem not in problems:
            problems.append(problem)
        if not where:  # a check across fields names its field first ("echo: ...")
            head = msg.split(":", 1)[0]
            where = head if ":" in msg and head.isidentifier() else ""
        if param is None and where:
            param = where
    message = "; ".join(problems) or "invalid request body"
    return JSONResponse(error_body(400, message, param, "invalid_request"), 400)


async def _http_error(_: Request, err: Exception) -> JSONResponse:
    assert isinstance(err, StarletteHTTPException)
    return JSONResponse(error_body(err.status_code, str(err.detail)), err.status_code)


def install(app: Any) -> None:
    app.add_exception_handler(APIError, _api_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
