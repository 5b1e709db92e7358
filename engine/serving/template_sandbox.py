"""The chat-template sandbox (spec §2.7): a sandboxed, immutable Jinja environment, run in worker processes.

Jinja's sandbox keeps a template away from Python's objects, but not from the CPU or memory: a loop over a long
string, `'x'.ljust(10**9)` or a filter chain can run for minutes or take a gibibyte inside the server, whatever
budget is checked between output chunks (issue 31). So templates render in a small pool of worker processes,
each under `RLIMIT_AS` (a template that allocates too much gets a MemoryError, not the server's memory), and a
render that overruns its wall-clock budget has its worker killed (SIGKILL) and replaced. Cooperative checks stay
inside the worker (`range()` capped at 100,000 items, repetition capped, the budget checked per loop item and
output chunk) so that the common overrun ends with the template's own clean message before the hard stop.

This file runs as the worker itself (`python -I template_sandbox.py`): it imports only the standard library and
Jinja, never the engine, torch or the server, so a worker starts in about a tenth of a second and holds a few tens
of MiB. A worker compiles each template source once (LRU cache), so a model's own template costs its compile only
on a worker's first request; a render of a small chat costs about a millisecond of pipe round trip
(bench/README.md, "Disconnect storm and template sandbox").

Protocol on the worker's stdin/stdout: 4-byte big-endian length, then the payload. Requests are pickles written by
the server (trusted direction); replies are JSON (`{"ok": text}` or `{"error": message}`), never unpickled, so a
worker that were subverted could not run code in the server.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import pickle
import struct
import subprocess
import sys
import threading
import time
from datetime import datetime
from functools import lru_cache
from typing import Any

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

MAX_RANGE = 100_000
RENDER_SECONDS = 5.0
KILL_GRACE_S = 0.5  # past the budget, the cooperative check has this long to answer before the worker is killed
MEMORY_MB = 512  # address space a worker may grow by beyond what it holds once Jinja is loaded
_HEADER = struct.Struct(">I")


class TemplateFailure(Exception):
    """A template problem (syntax, sandbox, raise_exception, budget): its message is safe to show the client."""


# ---- the sandbox (runs in the worker) ----


class _Budget:
    def __init__(self, seconds: float) -> None:
        self.deadline = time.monotonic() + seconds

    def tick(self) -> None:
        if time.monotonic() > self.deadline:
            raise jinja2.TemplateError("chat template rendering exceeded its time budget")


class _Env(ImmutableSandboxedEnvironment):
    intercepted_binops = frozenset(["*", "**"])

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        if operator == "**":
            if isinstance(right, int) and right > 64:
                raise jinja2.TemplateError("chat template exponent too large")
            return left**right
        if isinstance(left, (str, list, tuple)) and isinstance(right, int) or isinstance(right, (str, list, tuple)):
            seq, times = (left, right) if isinstance(left, (str, list, tuple)) else (right, left)
            if isinstance(times, int) and isinstance(seq, (str, list, tuple)) and len(seq) * times > MAX_RANGE * 10:
                raise jinja2.TemplateError("chat template repetition too large")
        return left * right


def _raise(message: str) -> None:
    raise jinja2.TemplateError(message)


def _tojson(x: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None, sort_keys: bool = False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _no_callables(value: Any) -> Any:
    return "" if callable(value) else value


@lru_cache(maxsize=64)
def _compile(source: str) -> jinja2.Template:
    # finalize: a callable printed by mistake (or on purpose: {{ raise_exception }}) renders as nothing, never as a
    # repr carrying a memory address. lipsum is Jinja's text generator, of no use to a chat template.
    env = _Env(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"], finalize=_no_callables)
    env.globals.pop("lipsum", None)
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env.from_string(source)


def _bounded_range(budget: _Budget):
    def bounded(*args: int):
        r = range(*args)
        if len(r) > MAX_RANGE:
            raise jinja2.TemplateError(f"range() is limited to {MAX_RANGE} items")
        for i in r:
            budget.tick()
            yield i

    return bounded


def render_here(source: str, variables: dict[str, Any], max_chars: int, seconds: float = RENDER_SECONDS) -> str:
    """Render in this process, with the cooperative checks only; raises TemplateFailure. The worker's body."""
    budget = _Budget(seconds)
    try:
        template = _compile(source)
        parts, size = [], 0
        for piece in template.generate(**variables, range=_bounded_range(budget)):
            budget.tick()
            size += len(piece)
            if size > max_chars:
                raise jinja2.TemplateError("rendered chat template exceeds the request size limit")
            parts.append(piece)
        return "".join(parts)
    except jinja2.TemplateError as exc:
        raise TemplateFailure(str(exc).splitlines()[0] if str(exc) else type(exc).__name__) from None
    except MemoryError:
        raise TemplateFailure("chat template rendering exceeded its memory budget") from None
    except (TypeError, ValueError, KeyError, IndexError, AttributeError, RecursionError, OverflowError) as exc:
        raise TemplateFailure(type(exc).__name__) from None


def _read(stream: Any, size: int) -> bytes:
    data = b""
    while len(data) < size:
        part = stream.read(size - len(data))
        if not part:
            raise EOFError
        data += part
    return data


def _limit_memory() -> None:
    """Cap this process's address space at what it holds now (Jinja loaded) plus MEMORY_MB. Where the platform
    has no RLIMIT_AS or /proc (macOS, Windows), only the time budget and the kill bound a render."""
    try:
        import resource

        with open("/proc/self/statm") as f:  # pages of address space held now
            held = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        resource.setrlimit(resource.RLIMIT_AS, (held + (MEMORY_MB << 20), held + (MEMORY_MB << 20)))
    except (ImportError, OSError, ValueError, AttributeError):
        pass


def _worker_main() -> None:
    """Serve renders on stdin/stdout until stdin closes (the server left)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C on the server's terminal is the server's to handle
    _limit_memory()
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    while True:
        try:
            (size,) = _HEADER.unpack(_read(stdin, _HEADER.size))
            source, variables, max_chars, seconds = pickle.loads(_read(stdin, size))
        except EOFError:
            return
        try:
            reply = {"ok": render_here(source, variables, max_chars, seconds)}
        except TemplateFailure as exc:
            reply = {"error": str(exc)}
        except BaseException as exc:  # whatever it was, the server gets a message, not a hang
            reply = {"error": type(exc).__name__}
        try:
            out = json.dumps(reply, ensure_ascii=False).encode("utf-8", "surrogatepass")
        except MemoryError:
            out = b'{"error": "chat template rendering exceeded its memory budget"}'
        stdout.write(_HEADER.pack(len(out)) + out)
        stdout.flush()
        variables = reply = out = None  # type: ignore[assignment]  # free before the next read


# ---- the pool (runs in the server) ----


class _Worker:
    def __init__(self) -> None:
        env = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "LC_ALL")}
        self.proc = subprocess.Popen(
            [sys.executable, "-I", os.path.abspath(__file__)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            close_fds=True,
        )

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        with contextlib.suppress(OSError):
            self.proc.kill()
        for stream in (self.proc.stdin, self.proc.stdout):
            with contextlib.suppress(OSError):
                if stream is not None:
                    stream.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)

    def render(self, payload: bytes, timeout: float) -> dict[str, Any]:
        """Send one render and wait for its reply; past `timeout` the worker is killed (TimeoutError)."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(_HEADER.pack(len(payload)) + payload)
        self.proc.stdin.flush()
        expired = threading.Event()

        def expire() -> None:
            expired.set()
            self.proc.kill()

        timer = threading.Timer(timeout, expire)  # a pipe read has no timeout: the kill ends the read
        timer.start()
        try:
            (size,) = _HEADER.unpack(_read(self.proc.stdout, _HEADER.size))
            reply = json.loads(_read(self.proc.stdout, size).decode("utf-8", "surrogatepass"))
        except (EOFError, ValueError, OSError):
            raise (TimeoutError if expired.is_set() else ConnectionError) from None
        finally:
            timer.cancel()
        return reply


class SandboxPool:
    """Worker processes that render templates, one render per worker at a time; a caller waits for a free one.
    Thread-safe: renders are called from worker threads (asyncio.to_thread). Workers start on first use and are
    replaced when killed (timeout), dead or out of memory."""

    def __init__(self, size: int = 2, seconds: float = RENDER_SECONDS) -> None:
        self.size = size
        self.seconds = seconds
        self._lock = threading.Lock()
        self._free: list[_Worker] = []
        self._slots = threading.BoundedSemaphore(size)
        self._all: set[_Worker] = set()
        self.kills = 0  # workers killed past their budget (for tests and the bench)

    def render(self, source: str, variables: dict[str, Any], max_chars: int) -> str:
        payload = pickle.dumps((source, variables, max_chars, self.seconds), protocol=pickle.HIGHEST_PROTOCOL)
        # Waiting for a slot counts against nobody's render budget, but it is bounded: at most `size` renders run,
        # each for at most its budget plus the grace.
        self._slots.acquire()
        worker = None
        try:
            worker = self._take()
            try:
                reply = worker.render(payload, self.seconds + KILL_GRACE_S)
            except TimeoutError:
                self.kills += 1
                self._drop(worker)
                worker = None
                raise TemplateFailure("chat template rendering exceeded its time budget") from None
            except OSError:  # the worker died under the render (BrokenPipeError, ConnectionError are OSErrors)
                self._drop(worker)
                worker = None
                raise TemplateFailure("chat template rendering stopped: its sandbox ran out of memory") from None
            if "error" in reply:
                if "memory" in str(reply["error"]):  # a worker that ran out of memory starts afresh
                    self._drop(worker)
                    worker = None
                raise TemplateFailure(str(reply["error"]))
            return str(reply["ok"])
        finally:
            if worker is not None:
                with self._lock:
                    self._free.append(worker)
            self._slots.release()

    def _take(self) -> _Worker:
        with self._lock:
            while self._free:
                worker = self._free.pop()
                if worker.alive():
                    return worker
                self._all.discard(worker)
            worker = _Worker()
            self._all.add(worker)
            return worker

    def _drop(self, worker: _Worker) -> None:
        worker.kill()
        with self._lock:
            self._all.discard(worker)

    def close(self) -> None:
        with self._lock:
            workers, self._free = list(self._all), []
            self._all.clear()
        for worker in workers:
            worker.kill()


_pools: dict[str, SandboxPool] = {}
_pools_lock = threading.Lock()


def pool(kind: str) -> SandboxPool:
    """The process's pool for one kind of template, started on first use, its workers ended when the process
    exits. Kinds keep apart what must not wait on each other: "model" (the model's or operator's own template)
    and "request" (a template a client sent), so hostile templates can slow only other clients' templates."""
    with _pools_lock:
        found = _pools.get(kind)
        if found is None:
            found = _pools[kind] = SandboxPool(size=max(1, min(2, os.cpu_count() or 1)))
            atexit.register(found.close)
        return found


if __name__ == "__main__":
    _worker_main()
