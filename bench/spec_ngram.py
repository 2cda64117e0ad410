"""N-gram speculative decoding on the real engine (issue 29, item 3): tokens per step and wall
time per generated token with and without ``--speculative-config '{"method": "ngram", ...}'``.

Workload: greedy requests on repeating prompts (byte tokens of repeated phrases) and a copy
task (a prompt, the model's own greedy continuation of it, the prompt again: the continuation
repeats, as in summarising or editing a given text). Each setting runs the same requests, one at
a time (``--batch 1``: the latency case) or all at once; off and on alternate over
``--repeats``, the median wall time is reported. Greedy outputs are checked identical. Also
reported: the draft acceptance rate, and the proposer's host time per call (the n-gram lookup
cost that the simulator's speculative step time charges per request).

    python bench/spec_ngram.py [--model tiny-llama] [--device cpu] [--k 4] [--batch 1]
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from tidal.core.request import Request
from tidal.engine.spec_config import SpeculativeConfig
from tidal.runtime.config import RuntimeConfig, build_engine
from tidal.runtime.tokenizer import ByteTokenizer

PHRASES = (
    "the tide, the tide, the tide comes in; the tide goes out, ",
    "def f(x):\n    return x + 1\n\ndef g(x):\n    return x + 2\n\n",
    "SELECT id, name FROM users WHERE id = 1; SELECT id, name FROM users WHERE id = 2; ",
    "hello world, hello world, hello world, ",
)


def engine(args: argparse.Namespace, spec: bool) -> Any:
    sc = None
    if spec:
        sc = SpeculativeConfig(
            method="ngram",
            num_speculative_tokens=args.k,
            prompt_lookup_min=args.lookup_min,
            prompt_lookup_max=args.lookup_max,
        )
    cfg = RuntimeConfig(
        model=args.model,
        device=args.device,
        num_threads=args.threads,
        num_kv_blocks=4096,
        block_size=16,
        speculative_config=sc,
    )
    return build_engine(cfg)


def generate(rt: Any, prompts: list[list[int]], out_len: int, batch: int) -> dict[str, Any]:
    """Run the prompts ``batch`` at a time; outputs, wall time, request-steps and tokens."""
    sched, outs = rt.scheduler, []
    executor = rt.engine.executor
    real = executor.execute
    count = {"rows": 0, "tokens": 0}

    def execute(plan: Any, *a: Any, **kw: Any) -> Any:
        out = real(plan, *a, **kw)
        count["rows"] += len({r.request_id for r, _ in out.sampled})
        return out

    executor.execute = execute
    t0 = time.perf_counter()
    for lo in range(0, len(prompts), batch):
        reqs = [
            Request(lo + i, 0, len(p), out_len, token_ids=list(p))
            for i, p in enumerate(prompts[lo : lo + batch])
        ]
        for r in reqs:
            sched.add_request(r)
        while sched.has_work():
            rt.engine.step()
        outs.extend(r.token_ids[r.prompt_len :] for r in reqs)
    wall = time.perf_counter() - t0
    executor.execute = real
    tokens = sum(len(o) for o in outs)
    return {"outs": outs, "wall": wall, "rows": count["rows"], "tokens": tokens}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="tiny-llama")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--lookup-min", type=int, default=1)
    ap.add_argument("--lookup-max", type=int, default=3)
    ap.add_argument("--out-len", type=int, default=128)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    tok = ByteTokenizer(512)
    rep = [tok.encode(p * 4) for p in PHRASES]
    off, on = engine(args, False), engine(args, True)
    cont = generate(off, rep, args.out_len, len(rep))["outs"]
    copy = [p + o + p for p, o in zip(rep, cont, strict=True)]
    for name, prompts in (("repeating", rep), ("copy", copy)):
        res: dict[str, list[dict[str, Any]]] = {"off": [], "on": []}
        on.runner.spec_stats.__init__()
        on.runner.spec_stats.accepted_per_pos.extend([0] * args.k)
        propose = on.scheduler.propose
        host = {"ns": 0, "calls": 0}

        def timed(req: Request, propose: Any = propose, host: dict = host) -> list[int]:
            t = time.perf_counter_ns()
            d = propose(req)
            host["ns"] += time.perf_counter_ns() - t
            host["calls"] += 1
            return d  # type: ignore[no-any-return]

        on.scheduler.propose = timed
        for _ in range(args.repeats):
            for key, rt in (("off", off), ("on", on)):
                res[key].append(generate(rt, prompts, args.out_len, args.batch))
        on.scheduler.propose = propose
        assert res["on"][0]["outs"] == res["off"][0]["outs"], "greedy outputs differ"
        s = on.runner.spec_stats
        for key in ("off", "on"):
            r0 = res[key][0]
            wall = statistics.median(r["wall"] for r in res[key])
            print(
                f"{name:9s} {key:3s}: {r0['tokens']} tokens, {r0['rows']} request-steps, "
                f"{r0['tokens'] / r0['rows']:.2f} tokens/step, "
                f"{wall / r0['tokens'] * 1e3:.2f} ms/token (median of {args.repeats})"
            )
        print(
            f"{name:9s} acceptance {s.acceptance_rate:.3f} ({s.num_accepted_tokens}/"
            f"{s.num_draft_tokens} draft tokens, per position {s.accepted_per_pos}); "
            f"n-gram lookup {host['ns'] / max(host['calls'], 1) / 1e3:.1f} µs per call"
        )


if __name__ == "__main__":
    main()
