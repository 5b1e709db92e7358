"""LLM Playground: the composition root. CLI flags -> Settings -> model pool -> service -> API + UI.

    python app.py [--model DIR_OR_GGUF] [--host H] [--port P] [--device auto|npu|cuda|mps|cpu] ...

Every knob of the API contract (spec §0.1) is a flag named after it and an environment variable
PLAYGROUND_<KNOB>; the flag wins. The API starts first and answers /health with 503 until the model has loaded;
the page is then built and mounted at / (engine/http/late_mount.py: a "starting" page there until it is).

This module only wires: the service is built by engine/serving/factory.py, the models offered and their pool by
engine/serving/model_catalog.py (the demo Qwen3 from demo_models/offer.py), the server's start, drain and stop by
engine/http/server_lifecycle.py. What is process-wide (logging, hub and tokenizer variables, thread pools, the exit
on a model that cannot work) is decided here, each with its comment.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Mapping
from typing import Any

import engine  # noqa: F401  (the process settings that must precede `import torch`: engine/__init__.py)
from engine import config as cfg
from engine import device as devices
from engine.cli import settings_from  # named here for notebooks, tests and bench/

log = logging.getLogger("playground")


def extras() -> list[Any]:
    """The models offered beside the registry's (engine/serving/model_catalog.py): the tiny demo Qwen3."""
    from demo_models.offer import TINY_QWEN

    return [TINY_QWEN]


def build_service(settings: cfg.Settings, progress: Any = None) -> Any:
    """engine/serving/factory.py's ChatService, named here for a notebook's kernel, a test or bench/."""
    from engine.serving.factory import build_service

    return build_service(settings, progress)


def model_candidates(settings: cfg.Settings) -> list[Any]:
    from engine.serving import model_catalog

    return model_catalog.model_candidates(settings, extras())


def new_pool(settings: cfg.Settings) -> Any:
    from engine.serving import model_catalog

    return model_catalog.new_pool(settings, extras())


def build_pool(settings: cfg.Settings, service: Any = None) -> Any:
    """The ModelPool of `settings`' models, with `service` (built from the first) already loaded in it."""
    from engine.serving import model_catalog

    return model_catalog.build_pool(settings, service, extras())


def load_first(settings: cfg.Settings, pool: Any) -> Any:
    from engine.serving import model_catalog

    return model_catalog.load_first(settings, pool, extras())


def create_application(settings: cfg.Settings, policy: Any) -> Any:
    """The API, with the page mounted on the same app; both go through one RequestPolicy (admission, limits,
    timeout, moderation, metrics, access log)."""
    return mount_page(create_api(settings, policy), settings, policy)


def create_api(settings: cfg.Settings, policy: Any) -> Any:
    """The API alone (no Gradio import): what answers /health while the page is built (issue 30)."""
    from engine.http.api import create_app

    app = create_app(settings.http, policy)
    if settings.mcp:  # MCP clients give a bearer secret whenever the server has credentials (Gradio's login form is
        from engine.http.auth import PrefixGuard, server_secrets  # for browsers); added before the server starts

        app.add_middleware(PrefixGuard, prefix="/mcp", secrets=server_secrets(settings.http))  # mcp_tool.PATH
    return app


def mount_page(app: Any, settings: cfg.Settings, policy: Any) -> Any:
    """The MCP tool (`--mcp`) and the page, mounted on the API's app."""
    from engine.http.auth import ui_auth

    if settings.mcp:
        from engine.http.auth import bearer_client, bearer_token
        from engine.serving.rights import is_admin
        from playground.page import mcp_tool

        def identify(headers: Mapping[str, str], host: str | None) -> tuple[str, bool]:
            return bearer_client(headers, host), is_admin(bearer_token(headers), settings.http)

        app = mcp_tool.mount(app, policy, identify)  # before the page: its mount at / would shadow /mcp
    if settings.ui:
        from playground.page.ui import mount

        # The page drives the same service as the API, so it takes the same secrets (any user name; one of the
        # API keys, Pangu tokens or app codes as the password). /health stays open: it is an API route.
        app = mount(app, policy, settings.page, auth=ui_auth(settings.http))
    return app


def policy_for(settings: cfg.Settings, service: Any = None, pool: Any = None) -> Any:
    """The RequestPolicy over `pool`'s current model (several models), else over `service` (None: loading)."""
    from engine.serving.policy import RequestPolicy

    return RequestPolicy(settings.serving, pool.current_service if pool is not None else lambda: service, models=pool)


def serve_in_thread(
    settings: cfg.Settings, service: Any, host: str = "127.0.0.1", policy: Any = None, pool: Any = None
) -> Any:
    """Serve an already built service on a free port of `host` from a daemon thread (a notebook's kernel, a test),
    so HTTP clients such as the openai SDK reach the engine that process already holds. Pass the notebook
    backend's `policy` to have its calls and the server's count against the same limits, or a ModelPool
    (`build_pool`) to serve several models. Returns engine/http/server_lifecycle.py's BackgroundServer."""
    from engine.http import server_lifecycle as life
    from engine.http.exposure import check_exposure

    check_exposure(settings.replace(host=host).http)
    sock = life.bound_socket(host)
    served = settings.replace(host=host, port=sock.getsockname()[1])
    app = create_application(served, policy or policy_for(served, service, pool))
    return life.start_in_thread(app, settings.http, sock, f"http://{host}:{served.port}")


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
    from engine.core.kv import KVDtypeError
    from engine.core.lora import LoraError
    from engine.core.quant import QuantError
    from engine.serving.factory import preflight

    try:  # the adapters' files and format, a device without graphs: refused before the bind
        preflight(settings.part(cfg.EngineSettings))  # `.engine` outside engine/ is the service's, by the rules
    except ValueError as exc:
        raise SystemExit(f"app.py: error: {exc}") from None
    configure_process(settings)
    from engine.http.exposure import check_exposure
    from engine.http.late_mount import LateMounts
    from engine.http.server_lifecycle import serve

    check_exposure(settings.http)
    try:  # the pool's memory estimate resolves --kv-cache-dtype: one the device cannot take is refused here
        pool = new_pool(settings)
    except KVDtypeError as exc:
        raise SystemExit(f"app.py: error: {exc}") from None

    policy = policy_for(settings, pool=pool)
    app = create_api(settings, policy)
    page = LateMounts(app) if settings.ui or settings.mcp else None  # API first, the page once the model is in

    def load() -> None:
        try:  # held by the pool alone: once it unloads this model, nothing keeps its weights alive
            (progress := load_first(settings, pool)).done.wait()
        except Exception:  # the registry could not be read: keep serving /health (503), the reason logged
            log.exception("model failed to load")
        else:  # an adapter that does not fit the model, a --quantization or --kv-cache-dtype it or the device cannot
            # take: the process ends (2), as a bad flag does; the pool logged any other failure (/health stays 503)
            if isinstance(progress.exception, (LoraError, QuantError, KVDtypeError)):
                log.error("app.py: error: %s", progress.exception)
                os._exit(2)
            if progress.error is None:  # (Whisper loads on the first audio request: preloading costs ~150 MB)
                log.info("ready: http://%s:%d/", settings.bind_host, settings.port)
        if page is not None and page.mount(lambda served: mount_page(served, settings, policy)):
            log.info("page ready: http://%s:%d/", settings.bind_host, settings.port)

    threading.Thread(target=load, name="loader", daemon=True).start()
    try:
        serve(app, settings.http)
    except KeyboardInterrupt:  # uvicorn re-raises the Ctrl-C it drained for: the server has stopped cleanly
        log.info("stopped")


if __name__ == "__main__":
    main(sys.argv[1:])
