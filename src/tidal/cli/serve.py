"""``tidal serve``: the real engine behind an OpenAI-compatible HTTP API.

Supervision: if the engine thread dies (a fault that leaves the scheduler inconsistent, or
repeated failed steps), the server stops accepting work, shuts down and ``tidal serve`` exits
with status 1, so that a process supervisor (systemd, Kubernetes) restarts it; faults confined to
requests only fail those requests (:mod:`tidal.runtime.driver`).
"""

from __future__ import annotations

import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from pydantic import ValidationError
from rich.markup import escape

import tidal.cli.flags  # noqa: F401  (registers the batching policies --batching lists)
from tidal.cli.app import Opt, TidalError, _fail, app, console, err_console
from tidal.cli.flagspec import typed_spelling
from tidal.cli.plain import styled
from tidal.core.validation import format_validation_error
from tidal.engine.policy import BATCHING

if TYPE_CHECKING:
    from tidal.runtime.driver import EngineDriver

EXIT_ENGINE_DIED = 1


def _batching_help() -> str:
    """``--batching``'s help: the registered policies (as ``tidal simulate --help`` lists
    them), each with its summary and whether it needs ``--profile``."""
    items = []
    for name in BATCHING.names():
        summary = BATCHING.summary(name)
        needs = "; needs --profile" if BATCHING.get(name).needs_step_costs else ""
        items.append(f"{name} ({summary}{needs})" if summary or needs else name)
    return (
        f"Batching policy: {'; '.join(items)}; or the name of one a --policy-module file "
        "registers."
    )


@app.command()
def serve(
    model_arg: Annotated[
        str | None,
        typer.Argument(
            metavar="[MODEL]",
            help="Model, as vLLM's `vllm serve MODEL`: a catalog id or a Hugging Face model "
            "directory (config.json, *.safetensors, tokenizer.json).",
            show_default=False,
        ),
    ] = None,
    model: Annotated[
        str | None, Opt(help="The model, as a flag (same as MODEL; default tiny-llama).")
    ] = None,
    weights: Annotated[
        Path | None, Opt(help="Safetensors weights (default: dummy seeded weights).")
    ] = None,
    host: Annotated[str, Opt(help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, Opt(help="TCP port.")] = 8000,
    api_key: Annotated[
        str | None, Opt(help="Require 'Authorization: Bearer KEY' on /v1 routes.")
    ] = None,
    max_queue: Annotated[int, Opt(help="Requests allowed to wait; beyond, HTTP 429.")] = 1024,
    served_model_name: Annotated[
        str | None, Opt(help="Model name clients use (default: --model; vLLM's flag).")
    ] = None,
    max_model_len: Annotated[
        int | None,
        Opt(help="Longest prompt + output served (vLLM's; default: what the model and KV hold)."),
    ] = None,
    gpu_memory_utilization: Annotated[
        float | None,
        Opt(help="CUDA: size the KV cache as this share of device memory, less weights (vLLM's)."),
    ] = None,
    enable_prefix_caching: Annotated[
        bool,
        Opt(
            "--enable-prefix-caching/--no-enable-prefix-caching",
            help="vLLM's automatic prefix caching.",
        ),
    ] = True,
    disable_log_requests: Annotated[
        bool, Opt(help="No per-request log lines (vLLM's; the access log at --log-level info).")
    ] = False,
    device: Annotated[str, Opt(help="auto | cpu | cuda | cuda:N.")] = "auto",
    dtype: Annotated[str, Opt(help="float32 | bfloat16 | float16.")] = "float32",
    num_kv_blocks: Annotated[int | None, Opt(help="KV cache blocks (default: --kv-cache-gb).")] = (
        None
    ),
    kv_cache_gb: Annotated[
        float | None, Opt(help="KV cache GB when --num-kv-blocks is unset (default 0.25).")
    ] = None,
    block_size: Annotated[int, Opt(help="Tokens per KV block.")] = 16,
    token_budget: Annotated[
        int, Opt("--token-budget", "--max-num-batched-tokens", help="Max tokens per step (B).")
    ] = 2048,
    max_seqs: Annotated[
        int, Opt("--max-seqs", "--max-num-seqs", help="Max running requests (N).")
    ] = 256,
    tensor_parallel_size: Annotated[
        int,
        Opt("--tp", "--tensor-parallel-size", "-tp", help="GPUs per replica (the runtime: 1)."),
    ] = 1,
    batching: Annotated[str, Opt(help=escape(_batching_help()))] = "mb",
    profile: Annotated[
        Path | None,
        Opt(help="This machine's step-time profile (tidal calibrate); needed by eb/ebplus."),
    ] = None,
    speculative_config: Annotated[
        str | None,
        Opt(
            help="vLLM's speculative decoding JSON; the real engine runs n-gram prompt lookup, "
            'e.g. \'{"method": "ngram", "num_speculative_tokens": 3}\' (greedy requests).'
        ),
    ] = None,
    threads: Annotated[int | None, Opt(help="CPU threads for torch.")] = None,
    seed: Annotated[int, Opt(help="Seed of the dummy weights and of sampling.")] = 0,
    log_level: Annotated[str, Opt(help="uvicorn log level.")] = "warning",
    max_body_bytes: Annotated[
        int, Opt(help="Largest request body accepted; beyond, HTTP 413 (read no further).")
    ] = 8 << 20,
    max_streams: Annotated[
        int | None, Opt(help="Streamed requests allowed at once; beyond, HTTP 429.")
    ] = None,
    policy_module: Annotated[
        list[str] | None,
        Opt(
            help="Python file (or module name) imported before the policies are looked up, so "
            "that a policy it registers is selected by its name, e.g. --batching NAME "
            "(repeatable)."
        ),
    ] = None,
    public_metrics: Annotated[
        bool,
        Opt(help="With --api-key, leave /metrics and the OpenAPI docs open (default: keyed)."),
    ] = False,
) -> None:
    """Serve a model over /v1/completions, /v1/chat/completions, /v1/models, /metrics."""
    try:
        # lazy: checks that the optional extra is installed
        import uvicorn

        from tidal.api.app import create_app
        from tidal.runtime.config import RuntimeConfig, build_engine
        from tidal.runtime.driver import EngineDriver
        from tidal.runtime.hf_tokenizer import tokenizer_for
        from tidal.runtime.tokenizer import HF_DIR, ByteTokenizer
    except ImportError as err:
        _fail(TidalError(f"{err}; install the server with: pip install 'tidal[serve]'"))
        return
    for flag, value, low in (
        ("--max-queue", max_queue, 1),
        ("--max-body-bytes", max_body_bytes, 1),
        ("--max-streams", max_streams, 1),
    ):
        if value is not None and value < low:
            _fail(TidalError(f"{flag}: must be >= {low}, got {value}"))
    _check_listen(host, port)
    if model_arg and model and model_arg != model:
        _fail(TidalError(f"model: MODEL {model_arg!r} and --model {model!r} differ; give one"))
        return
    model = model_arg or model or "tiny-llama"
    if tensor_parallel_size != 1:
        _fail(
            TidalError(
                f"tensor_parallel_size: the real engine runs on one device, got "
                f"{tensor_parallel_size} (simulate, plan and sweep model TP)"
            )
        )
        return
    if gpu_memory_utilization is not None and (kv_cache_gb or num_kv_blocks):
        _fail(
            TidalError(
                "gpu_memory_utilization: give it or --kv-cache-gb/--num-kv-blocks, not both "
                "(each sizes the KV cache)"
            )
        )
    try:
        spec = _speculative(speculative_config, batching)
        cfg = RuntimeConfig(
            model=model,
            weights=str(weights) if weights else None,
            device=device,
            dtype=dtype,  # type: ignore[arg-type]
            num_kv_blocks=num_kv_blocks,
            kv_cache_gb=0.25 if kv_cache_gb is None else kv_cache_gb,
            gpu_memory_utilization=gpu_memory_utilization,
            max_model_len=max_model_len,
            prefix_caching=enable_prefix_caching,
            block_size=block_size,
            token_budget=token_budget,
            max_seqs=max_seqs,
            batching=batching,
            profile=str(profile) if profile else None,
            num_threads=threads,
            seed=seed,
            speculative_config=spec,
            policy_modules=policy_module or [],
        )
        rt = build_engine(cfg)
        tokenizer = tokenizer_for(model, rt.runner.model.config.vocab_size)
    except TidalError as err:
        _fail(err)
        return
    except ValidationError as err:
        _fail(TidalError(format_validation_error(err, RuntimeConfig, _flag_names())))
        return
    except ValueError as err:
        _fail(TidalError(str(err)))
        return
    name = served_model_name or model
    driver = EngineDriver(rt)
    api = create_app(
        driver,
        name,
        api_key=api_key,
        max_queue=max_queue,
        max_body_bytes=max_body_bytes,
        public_meta=public_metrics,
        max_streams=max_streams,
        tokenizer=tokenizer,
    )
    console.print(
        f"serving {name} ({rt.kv.num_blocks} KV blocks of {rt.kv.block_size}, context "
        f"{rt.max_model_len}) on http://{host}:{port}/v1"
    )
    if isinstance(tokenizer, ByteTokenizer):
        console.print(
            f"tokenizer: bytes (for clients that count tokens: {HF_DIR}, e.g. "
            "aiperf --tokenizer, guidellm --processor)",
            soft_wrap=True,
        )
    uv = uvicorn.Config(
        api, host=host, port=port, log_level=log_level, access_log=not disable_log_requests
    )
    server = uvicorn.Server(uv)
    code = run_supervised(server, driver)
    if code:
        raise typer.Exit(code)


_PARAM_OF_FIELD = {
    "num_threads": "threads",
    "prefix_caching": "enable_prefix_caching",
    "policy_modules": "policy_module",
}
"""``RuntimeConfig`` fields set by a ``serve`` parameter of another name (others: the same)."""


def _flag_names() -> dict[str, str]:
    """``RuntimeConfig`` field → the ``serve`` flag that sets it, as typed on the command line
    (``--max-num-seqs``, not ``--max-seqs``, when that was given), read from the options
    declared on :func:`serve`."""
    import typing

    from typer.models import OptionInfo

    from tidal.runtime.config import RuntimeConfig

    hints = typing.get_type_hints(serve, include_extras=True)
    out = {}
    for field in RuntimeConfig.model_fields:
        param = _PARAM_OF_FIELD.get(field, field)
        info = next(
            (m for m in getattr(hints.get(param), "__metadata__", ()) if isinstance(m, OptionInfo)),
            None,
        )
        if info is None:
            continue
        # typer reads a str first argument of an Annotated Option as its first name
        d = info.default
        first = (d,) if isinstance(d, str) and d.startswith("-") else ()
        decls = (*first, *(info.param_decls or ())) or ("--" + param.replace("_", "-"),)
        spellings = [n for d in decls for n in d.split("/")]
        out[field] = typed_spelling(spellings, sys.argv[1:]) or spellings[0]
    return out


def _speculative(text: str | None, batching: str) -> Any:
    """``--speculative-config`` parsed and checked for the real engine (errors name the
    flag); None without it."""
    if text is None:
        return None
    from tidal.engine.spec_config import parse_speculative_config
    from tidal.runtime.spec_decode import check_runtime_speculation

    spec = parse_speculative_config(text)
    check_runtime_speculation(spec, batching, "--speculative-config")
    return spec


def run_supervised(server: Any, driver: EngineDriver) -> int:
    """Run ``server`` (a ``uvicorn.Server``) until it stops; 0, or ``EXIT_ENGINE_DIED`` when
    it stopped because the engine thread died (the server is told to exit at that moment)."""

    def on_fatal(_: BaseException) -> None:
        server.should_exit = True

    driver.on_fatal.append(on_fatal)
    server.run()
    if driver.failure is not None:
        err_console.print(
            styled(("error:", "bold red"), f" the engine died: {driver.failure!r}; exiting")
        )
        return EXIT_ENGINE_DIED
    return 0


def _check_listen(host: str, port: int) -> None:
    """Refuse an impossible --host/--port before loading the model (uvicorn would end in a
    traceback, or after the model has loaded)."""
    if not 1 <= port <= 65535:
        _fail(TidalError(f"--port: {port} is not a TCP port (use 1-65535)"))
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as err:
        _fail(TidalError(f"--host: cannot resolve {host!r} ({err})"))
        return
    family, kind, proto, _, addr = infos[0]
    with socket.socket(family, kind, proto) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(addr)
        except OSError as err:
            _fail(TidalError(f"--host/--port: cannot listen on {host}:{port} ({err.strerror})"))
