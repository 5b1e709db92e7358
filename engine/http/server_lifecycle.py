"""A server's lifecycle on uvicorn: started on a socket bound beforehand from a daemon thread (a notebook's kernel, a
test: `start_in_thread`), or run in the foreground with SIGTERM / Ctrl-C draining in-flight requests first
(`serve`); `drain` is the drain itself."""

from __future__ import annotations

import dataclasses
import logging
import socket
import threading
import time
from typing import Any

from engine import config as cfg

log = logging.getLogger("playground")


@dataclasses.dataclass
class BackgroundServer:
    url: str
    server: Any
    thread: threading.Thread

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


def uvicorn_config(app: Any, settings: cfg.HttpSettings, **options: Any) -> Any:
    """uvicorn's Config for `app`, with `--read-timeout-s` as its deadline on request headers (the body's is the
    app's own middleware, engine/http/slow_clients.py)."""
    import uvicorn

    if settings.read_timeout_s:
        from engine.http.slow_clients import header_deadline

        options["http"] = header_deadline(settings.read_timeout_s)
    return uvicorn.Config(app, **options)


def bound_socket(host: str) -> socket.socket:
    """A socket bound to a free port of `host`, to be handed to uvicorn: no window in which another process takes
    the port between choosing and binding it."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.bind((host, 0))
    return sock


def start_in_thread(app: Any, settings: cfg.HttpSettings, sock: socket.socket, url: str) -> BackgroundServer:
    """Serve `app` on `sock` (`bound_socket`) from a daemon thread; returns, as reachable at `url`, once uvicorn has
    started."""
    import uvicorn

    server = uvicorn.Server(uvicorn_config(app, settings, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="server", daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("server did not start")
        time.sleep(0.05)
    return BackgroundServer(url, server, thread)


def drain(app: Any, timeout: float) -> int:
    """Refuse new work (/health turns 503), let in-flight requests finish for `timeout` s, then end the rest
    cleanly (their streams close with insufficient_system_resource). Blocking; returns how many were left."""
    admission = app.state.admission
    log.info("draining: %d request(s) in flight, up to %.0f s", admission.in_flight, timeout)
    left = admission.drain(timeout)
    log.info("drained (%d request(s) still open)", left)
    return left


def serve(app: Any, settings: cfg.HttpSettings) -> None:
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
