"""Smoke-test a running ``tidal serve`` over loopback: wait until it answers, send a completion,
a chat completion, a streamed completion and a batch of concurrent completions, read /metrics,
and write what came back (status, latency, tokens) as JSON. Exit 1 if any request failed.

Usage: python bench/gpu/serve_smoke.py --port 8765 --model NAME --out serve.json [--wait 240]
"""

from __future__ import annotations

import argparse
import json
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any


def _call(url: str, body: dict[str, Any] | None = None, timeout: float = 120) -> dict[str, Any]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    t0 = time.perf_counter()
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            raw = resp.read().decode()
            status = resp.status
    except urllib.error.HTTPError as err:
        raw, status = err.read().decode(errors="replace"), err.code
    except (urllib.error.URLError, OSError) as err:
        return {"url": url, "ok": False, "error": repr(err)}
    out: dict[str, Any] = {"url": url, "status": status, "ok": status == 200}
    out["latency_s"] = round(time.perf_counter() - t0, 4)
    if body is not None and body.get("stream"):
        events = [ln[6:] for ln in raw.splitlines() if ln.startswith("data: ")]
        out["events"] = len(events)
        out["ok"] = out["ok"] and bool(events) and events[-1] == "[DONE]"
    elif raw.lstrip().startswith("{"):
        payload = json.loads(raw)
        out["usage"] = payload.get("usage")
        choices = payload.get("choices") or [{}]
        out["finish_reason"] = choices[0].get("finish_reason")
    else:
        out["bytes"] = len(raw)
    return out


def wait_ready(base: str, wait_s: float) -> float:
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < wait_s:
        if _call(f"{base}/v1/models", timeout=5).get("ok"):
            return time.perf_counter() - t0
        time.sleep(1.0)
    raise SystemExit(f"server at {base} not ready after {wait_s:.0f} s")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=8765)
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--wait", type=float, default=240.0)
    a = ap.parse_args()
    base = f"http://127.0.0.1:{a.port}"
    report: dict[str, Any] = {"ready_after_s": round(wait_ready(base, a.wait), 2)}
    comp = {"model": a.model, "prompt": "The tide comes in", "max_tokens": 32}
    report["completion"] = _call(f"{base}/v1/completions", comp)
    chat = {"model": a.model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 16}
    report["chat"] = _call(f"{base}/v1/chat/completions", chat)
    report["stream"] = _call(f"{base}/v1/completions", {**comp, "stream": True})
    with ThreadPoolExecutor(8) as pool:
        batch = [{**comp, "prompt": f"request {i} " * (8 + 4 * i)} for i in range(8)]
        report["concurrent"] = list(pool.map(lambda b: _call(f"{base}/v1/completions", b), batch))
    report["metrics"] = _call(f"{base}/metrics")
    calls = [report[k] for k in ("completion", "chat", "stream", "metrics")]
    report["ok"] = all(c["ok"] for c in calls + report["concurrent"])
    a.out.write_text(json.dumps(report, indent=2))
    print(json.dumps({"ok": report["ok"], "ready_after_s": report["ready_after_s"]}))
    raise SystemExit(0 if report["ok"] else 1)


if __name__ == "__main__":
    main()
