"""One streamed request to an OpenAI-compatible server, timed on the client (vLLM ``bench
serve`` conventions).

Times are ``time.perf_counter_ns()`` of the client: ``sent_ns`` just before the request is
written, ``first_token_ns`` when the first chunk carrying text arrives (TTFT = first − sent),
one inter-token latency per later text chunk (the gap since the previous one), ``finish_ns``
when the stream ends with ``data: [DONE]``. Output tokens are the server's
``usage.completion_tokens`` (``stream_options.include_usage``), else the number of text chunks.
A request fails on a transport error, a non-200 status, an error event in the stream or a
stream that ends without ``[DONE]``; the error's text is kept.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from tidal.measure.dataset import BenchRequest


@dataclass(slots=True)
class RequestResult:
    sent_ns: int = -1
    first_token_ns: int = -1
    finish_ns: int = -1
    prompt_tokens: int = -1
    output_tokens: int = 0
    itl_ns: list[int] = field(default_factory=list)
    error: str = ""
    finish_reason: str = ""

    @property
    def success(self) -> bool:
        return not self.error and self.finish_ns >= 0


def payload(req: BenchRequest, model: str, chat: bool, ignore_eos: bool) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": model,
        "max_tokens": req.output_len,
        "temperature": 0.0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if ignore_eos:
        body["ignore_eos"] = True
    if chat:
        body["messages"] = [{"role": "user", "content": req.prompt}]
    else:
        body["prompt"] = req.prompt
    return body


def _text_of(chunk: dict[str, Any]) -> str:
    choices = chunk.get("choices") or []
    if not choices:
        return ""
    c = choices[0]
    if "text" in c:
        return c.get("text") or ""
    return (c.get("delta") or {}).get("content") or ""


async def send(
    client: Any, url: str, body: dict[str, Any], headers: dict[str, str]
) -> RequestResult:
    """Stream one request through an ``httpx2.AsyncClient``; never raises for a failed
    request (the result says why)."""
    res = RequestResult()
    chunks = 0
    last = -1
    done = False
    res.sent_ns = time.perf_counter_ns()
    try:
        async with client.stream("POST", url, json=body, headers=headers) as resp:
            if resp.status_code != 200:
                text = (await resp.aread()).decode("utf-8", "replace")
                res.error = f"HTTP {resp.status_code}: {text[:300]}"
                return res
            async for line in resp.aiter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    done = True
                    break
                chunk = json.loads(data)
                if "error" in chunk:
                    res.error = f"stream error: {json.dumps(chunk['error'])[:300]}"
                    return res
                now = time.perf_counter_ns()
                if _text_of(chunk):
                    chunks += 1
                    if res.first_token_ns < 0:
                        res.first_token_ns = now
                    else:
                        res.itl_ns.append(now - last)
                    last = now
                choices = chunk.get("choices") or []
                if choices and choices[0].get("finish_reason"):
                    res.finish_reason = choices[0]["finish_reason"]
                usage = chunk.get("usage")
                if usage:
                    res.output_tokens = int(usage.get("completion_tokens") or 0)
                    res.prompt_tokens = int(usage.get("prompt_tokens") or -1)
    except Exception as err:  # a transport or protocol error fails this request only
        res.error = f"{type(err).__name__}: {err}"
        return res
    if not done:
        res.error = "the stream ended without [DONE]"
        return res
    res.finish_ns = time.perf_counter_ns()
    if res.output_tokens <= 0:
        res.output_tokens = chunks
    if res.first_token_ns < 0:  # no text at all (e.g. an immediate stop): TTFT = E2E
        res.first_token_ns = res.finish_ns
    return res
