"""Several models behind one server: the loaded ones serve, the others load on demand (issue 22).

`ModelPool` holds the registry's candidates (engine/model_registry.py), the ChatService of each loaded model, and
the one load in progress. A request for a loaded model (or one of its LoRA adapters) goes to that model's service;
for a candidate not loaded it starts the load (when the caller may: an administrator once credentials are set) and
is answered 503 with Retry-After until the model is ready, while the other loaded models keep serving. Before a
load the least recently used models are unloaded until the estimates (weights + KV pool) fit the memory budget
(`--models-memory-mb`, else what psutil says is available plus what the loaded models hold). An unloaded model's
running requests finish first (up to `UNLOAD_WAIT_S`); new ones no longer reach it.

`current` is the model a new page opens on and a request without a model of its own (Pangu V1) gets: the first
model at start, then the one `POST /server/models/{id}/load` switched to (or, when the current one was unloaded,
the newest). A page's own pick never changes it (playground/page/header_models.py).
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from engine.model_registry import Candidate
from engine.protocol.errors import ForbiddenError, NotFoundError, ServiceUnavailableError
from engine.serving.service import ChatService

log = logging.getLogger(__name__)

Status = Literal["loaded", "loading", "loadable", "failed"]
Report = Callable[[float, str], None]  # (fraction done 0..1, what is happening) from the loader
Loader = Callable[[Candidate, Report], ChatService]
RETRY_AFTER_S = 5
UNLOAD_WAIT_S = 30.0
MIB = 1 << 20


@dataclass
class Progress:
    """One load, as the page's progress bar and `/v1/models` show it."""

    model: str
    started: float = field(default_factory=time.monotonic)
    fraction: float = 0.0
    stage: str = "waiting"
    done: threading.Event = field(default_factory=threading.Event)
    error: str | None = None
    exception: BaseException | None = None  # what failed it, for the caller that started it (app.py's first load)

    def as_json(self) -> dict[str, Any]:
        return {
            "fraction": round(self.fraction, 3),
            "stage": self.stage,
            "elapsed_s": round(time.monotonic() - self.started, 1),
        }


def release_freed_memory() -> None:
    """Hand freed memory back to the OS, after a load and after an unload. glibc keeps large freed blocks in the
    arena of the thread that allocated them (each load runs on its own thread), so without this an unloaded SmolLM2
    left the process's RSS at 1029 MB instead of 483 MB (measured), and the next load added its full size again.
    Not glibc: a no-op."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).malloc_trim(0)


def available_memory() -> int:
    import psutil

    return int(psutil.virtual_memory().available)


class ModelPool:
    def __init__(
        self,
        candidates: list[Candidate],
        loader: Loader,
        *,
        bytes_per_param: int = 2,
        kv_element: int = 0,
        kv_tokens: int = 65536,
        seqs: int = 0,
        budget_mb: int = 0,
        quantization: str = "none",
        free_memory: Callable[[], int] = available_memory,
        admin: Callable[[str | None], bool] = lambda key: False,
    ) -> None:
        self.candidates = {c.id: c for c in candidates}
        self._loader = loader
        self._bytes_per_param = bytes_per_param
        self._kv_element = kv_element  # bytes of a KV page's element (--kv-cache-dtype; 0: bytes_per_param)
        self._quantization = quantization  # the server's --quantization (a precision entry may name its own)
        self._kv_tokens = kv_tokens
        self._seqs = seqs  # live sequences an engine runs at most: sizes a sliding-window KV pool
        self._budget_mb = budget_mb
        self._free_memory = free_memory
        self.admin = admin  # whether a key (None: none) may load models (the server says: app.py; else no one)
        self._lock = threading.Lock()
        self._load_lock = threading.Lock()  # one load at a time: two would share the same cores and memory
        self._services: OrderedDict[str, ChatService] = OrderedDict()  # least recently used first
        self._loading: dict[str, Progress] = {}
        self._failed: dict[str, str] = {}
        self.current: str | None = candidates[0].id if candidates else None

    # ---- what is served ----

    def set_candidates(self, candidates: list[Candidate]) -> None:
        """The registry, once read (app.py reads it on its loader thread: the bundled model may convert first)."""
        with self._lock:
            self.candidates = {c.id: c for c in candidates}
            self.current = self.current or (candidates[0].id if candidates else None)

    def describe(self, candidate: Candidate) -> None:
        """A candidate's description read again (a bundled model, once fetched: from its files), in its place."""
        with self._lock:
            if candidate.id in self.candidates:
                self.candidates[candidate.id] = candidate

    def offer(self, candidate: Candidate) -> None:
        """One more candidate, after the others (the quality meter's full-precision reference of a model, made on
        first use when the server was not started with it); a candidate already offered stays as it is."""
        with self._lock:
            self.candidates.setdefault(candidate.id, candidate)

    def add(self, model_id: str, service: ChatService) -> None:
        """A model already loaded (the first, built at start)."""
        if service.served_name != model_id:  # requests name the id: a service under another name would refuse them
            raise ValueError(f"the service for {model_id!r} serves {service.served_name!r}")
        with self._lock:
            self._services[model_id] = service
            self.current = self.current if self.current in self._services else model_id

    def current_service(self) -> ChatService | None:
        """The current model's service; while it is not loaded (switching), the most recently used loaded one."""
        with self._lock:
            svc = self._services.get(self.current or "")
            return svc if svc is not None or not self._services else next(reversed(self._services.values()))

    def get(self, model_id: str) -> ChatService | None:
        """The loaded model's service (None when it is not loaded), without counting as a use."""
        with self._lock:
            return self._services.get(model_id)

    def loaded(self) -> list[str]:
        with self._lock:
            return list(self._services)

    def status(self, model_id: str) -> Status:
        with self._lock:
            if model_id in self._services:
                return "loaded"
            if model_id in self._loading:
                return "loading"
            return "failed" if model_id in self._failed else "loadable"

    def progress(self, model_id: str) -> Progress | None:
        with self._lock:
            return self._loading.get(model_id)

    def memory_bytes(self, model_id: str) -> int:
        c = self.candidates[model_id]
        return c.memory_bytes(self._bytes_per_param, self._kv_tokens, self._seqs, self._kv_element, self._quantization)

    def budget_bytes(self) -> int:
        """What the loaded models may take together: the configured budget, else free memory plus what they hold."""
        if self._budget_mb:
            return self._budget_mb * MIB
        held = sum(self.memory_bytes(m) for m in self.loaded() if m in self.candidates)
        return self._free_memory() + held

    def owner_of(self, name: str) -> str | None:
        """The loaded model `name` is, or whose LoRA adapter it is."""
        with self._lock:
            if name in self._services:
                return name
            return next((m for m, svc in self._services.items() if name in svc.adapters), None)

    def service_for(self, name: str, may_load: bool = True) -> ChatService | None:
        """The service that answers a request for `name`; None for a name no model has (the caller's service
        check then says "Model not found"). A candidate not loaded starts loading (if `may_load`) and raises 503."""
        owner = self.owner_of(name)
        if owner is not None:
            with self._lock:
                self._services.move_to_end(owner)
                return self._services[owner]
        if name not in self.candidates:
            return None
        status = self.status(name)
        if status == "failed":
            raise ServiceUnavailableError(f"Model {name[:64]!r} failed to load; see the server log.")
        if status == "loadable":
            if not may_load:
                raise ForbiddenError(
                    f"Model {name[:64]!r} is not loaded, and loading a model needs an admin key (--admin-keys)."
                )
            self.load(name)
        raise ServiceUnavailableError(
            f"Model {name[:64]!r} is loading; retry in a few seconds.", retry_after=RETRY_AFTER_S
        )

    # ---- loading and unloading ----

    def load(self, model_id: str, make_current: bool = False, check_memory: bool = True) -> Progress:
        """Start loading `model_id` in the background (or join the load under way); its Progress says when it is
        done. Loading a loaded model only makes it current (`make_current`). Without `check_memory`, nothing is
        unloaded and no budget refuses it (the model the server was started for)."""
        if model_id not in self.candidates:
            raise NotFoundError(f"Model not found: {model_id[:64]!r}.")
        with self._lock:
            if model_id in self._services:
                self.current = model_id if make_current else self.current
                done = Progress(model_id, fraction=1.0, stage="loaded")
                done.done.set()
                return done
            if model_id in self._loading:
                return self._loading[model_id]
            progress = self._loading[model_id] = Progress(model_id)
            self._failed.pop(model_id, None)
        threading.Thread(
            target=self._load, args=(progress, make_current, check_memory), name=f"load {model_id}", daemon=True
        ).start()
        return progress

    def _load(self, progress: Progress, make_current: bool, check_memory: bool = True) -> None:
        model_id = progress.model
        try:
            with self._load_lock:
                need, budget = self.memory_bytes(model_id), self.budget_bytes()
                if check_memory and need > budget:
                    raise MemoryError(f"needs about {need // MIB} MiB, the budget is {budget // MIB} MiB")
                for old in self._to_unload(need, budget) if check_memory else []:
                    progress.stage = f"unloading {old}"
                    self.unload(old)

                def report(fraction: float, stage: str) -> None:
                    progress.fraction, progress.stage = fraction, stage

                started = time.perf_counter()
                service = self._loader(self.candidates[model_id], report)
                # the load's passing copies (a GGUF dequantized to float32, then its blocks kept instead) go back
                # to the OS too: the server on SmolLM2 at its Q4_1 held 1,147 MB of RSS ready, 524 MB with this
                release_freed_memory()
                log.info("model %s loaded in %.1f s", model_id, time.perf_counter() - started)
            with self._lock:
                self._services[model_id] = service
                if make_current or self.current not in self._services:
                    self.current = model_id
            progress.fraction, progress.stage = 1.0, "loaded"
        except Exception as exc:  # the reason goes to the log; the API says only that it failed
            log.exception("model %s failed to load", model_id)
            progress.error = f"{type(exc).__name__}: {exc}"
            progress.exception = exc
            progress.stage = "failed"
            with self._lock:
                self._failed[model_id] = progress.error
        finally:
            with self._lock:
                self._loading.pop(model_id, None)
            progress.done.set()

    def _to_unload(self, need: int, budget: int) -> list[str]:
        """Least recently used first, until what stays loaded and the new model fit the budget."""
        loaded = self.loaded()
        held = sum(self.memory_bytes(m) for m in loaded if m in self.candidates)
        out = []
        for old in loaded:
            if held + need <= budget:
                break
            out.append(old)
            held -= self.memory_bytes(old) if old in self.candidates else 0
        return out

    def unload(self, model_id: str) -> bool:
        """Stop serving `model_id`: new requests no longer reach it, running ones get `UNLOAD_WAIT_S` to finish,
        then its engine stops and its memory is freed. False when it was not loaded."""
        with self._lock:
            service = self._services.pop(model_id, None)
        if service is None:
            return False
        deadline = time.monotonic() + UNLOAD_WAIT_S
        while time.monotonic() < deadline:
            load = service.engine.load()
            if not load["running"] and not load["waiting"]:
                break
            time.sleep(0.05)
        service.engine.shutdown()
        del service
        gc.collect()  # the weights go now, before the next model's arrive
        release_freed_memory()
        log.info("model %s unloaded", model_id)
        return True

    def shutdown(self) -> None:
        for model_id in self.loaded():
            with self._lock:
                service = self._services.pop(model_id, None)
            if service is not None:
                service.engine.shutdown()

    # ---- what /v1/models and the page show ----

    def entry(self, model_id: str) -> dict[str, Any]:
        """The registry's description of a candidate with its status, estimated memory and load progress."""
        c = self.candidates[model_id]
        status = self.status(model_id)
        out: dict[str, Any] = {"status": status, **c.describe(), "memory_bytes": self.memory_bytes(model_id)}
        progress = self.progress(model_id)
        if progress is not None:
            out["loading"] = progress.as_json()
        return out
