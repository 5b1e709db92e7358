"""The models a server offers and the pool that loads them (engine/serving/model_pool.py): the registry's entries
(engine/model_registry.py) for `--model`, `--models`, `--models-dir` and the bundled models, plus the extra models
the composition root offers (the tiny demo Qwen3 of demo_models/, which the engine knows nothing of), and the
pool's loader, which fetches, converts or builds a model on its first pick and builds its service."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine import config as cfg
from engine import device as devices
from engine.model_registry import Candidate
from engine.serving.model_pool import ModelPool, Progress, Report
from engine.serving.service import ChatService


@dataclass(frozen=True)
class ExtraModel:
    """A model offered under `id` that no `--model` path names: `describe()` gives its registry entry (None: not
    offered, the reason logged), `build(cache root, report)` makes its weights on its first pick and returns their
    directory. `source` is the entry's source, which names it to the loader."""

    id: str
    source: str
    describe: Callable[[], Candidate | None]
    build: Callable[[Path, Report], Path]


def bundled_candidate(source: str, model_id: str, settings: cfg.EngineSettings) -> Candidate:
    """A model fetched from the package index ("" the default, or an engine.models.BUNDLED name): described from
    its converted cache when it is there, else from the facts its publisher states. Never downloads."""
    from engine import model_registry as registry
    from engine import models

    cache = models.cache_root(settings.cache_dir)
    out = models.bundled_dir(source, cache)
    if out is not None and (out / "config.json").is_file():
        return with_gguf(registry.describe(source, model_id, out, settings.tool_call_parser), cache)
    if not source:
        size = models.DEFAULT_SIZE_MB * 10**6
        found = registry.describe_static(source, model_id, models.DEFAULT_CONFIG, models.DEFAULT_PARAMETERS, size)
    else:
        spec = models.BUNDLED[source.lower()]
        size = spec.size_mb * 10**6
        found = registry.describe_static(source, model_id, spec.config, spec.parameters, size)
    return dataclasses.replace(found, gguf_bytes=size)  # what it downloads is its GGUF


def with_gguf(candidate: Candidate, cache: Path) -> Candidate:
    """`candidate` with the size of the GGUF it was converted from, where there is one on disk (what the memory
    estimate counts under `--quantization auto`)."""
    from engine import models

    found = models.gguf_source(candidate.source, cache) if candidate.format == "hf" else None
    return dataclasses.replace(candidate, gguf_bytes=found.stat().st_size) if found is not None else candidate


def model_candidates(settings: cfg.Settings, extras: Sequence[ExtraModel] = ()) -> list[Candidate]:
    """The registry (engine/model_registry.py): `--model` (its first value served at start), `--models` (a repeated
    `--model`) and what `--models-dir` holds, described from their files, then the bundled models not among them
    (SmolLM2, Gemma 3 270M) and the `extras` (the tiny demo Qwen3), always offered. Nothing is downloaded or converted here: a bundled
    model not on disk yet is described from its published facts, and fetched by the pool's loader when picked."""
    from engine import model_registry as registry
    from engine import models

    cache = models.cache_root(settings.cache_dir)

    def describe(source: str, model_id: str, first: bool = False) -> Candidate:
        if models.bundled_dir(source, cache) is not None:
            return bundled_candidate(source, model_id, settings.engine)
        resolved = models.resolve_model_dir(source, cache)[0] if first else None  # a .gguf converts once
        return with_gguf(registry.describe(source, model_id, resolved, settings.tool_call_parser), cache)

    def described(source: str) -> Candidate:  # SOURCE@PRECISION: a precision entry of SOURCE (issue 32)
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
            found.append(bundled_candidate(source, name, settings.engine))
    offered = (extra.describe() for extra in extras if extra.id not in taken)
    return registry.unique([*found, *(c for c in offered if c is not None)])


def planned_kv_dtype(settings: cfg.EngineSettings, place: Any) -> Any:
    """The KV pages' dtype a lean runner (engine/core/model_runner.py) will pick for `--kv-cache-dtype` on this
    placement, for the pool's memory estimate: a CPU with the kernels runs float32 activations whatever --dtype."""
    import torch

    from engine.core import cpu_kernels
    from engine.core.kv import kv_dtype

    kernels = place.kind == "cpu" and place.dtype in (torch.float32, torch.bfloat16) and cpu_kernels.kernels()
    activations = torch.float32 if kernels else place.dtype
    return kv_dtype(settings.kv_cache_dtype, place.device, activations, bool(kernels))


def new_pool(settings: cfg.Settings, extras: Sequence[ExtraModel] = ()) -> ModelPool:
    """An empty ModelPool whose loader builds a service per candidate with this server's settings (the first
    model keeps its `--served-model-name` and LoRA adapters). A bundled model not on disk yet is downloaded and
    converted (an extra model built) by the loader first, its progress reported as the load's."""
    import torch

    from engine import model_registry as registry
    from engine import models
    from engine.serving.factory import build_service
    from engine.serving.rights import is_admin

    builders = {extra.source: extra.build for extra in extras}

    def loader(candidate: Candidate, report: Report) -> ChatService:
        first = candidate.source == settings.model and not candidate.precision
        cache, source, step = models.cache_root(settings.cache_dir), candidate.source, report
        if source in builders:
            source = str(builders[source](cache, report))
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
            fresh = with_gguf(
                registry.describe(candidate.source, candidate.id, resolved, settings.tool_call_parser), cache
            )
            pool.describe(dataclasses.replace(fresh, precision=candidate.precision))
        return service

    place = devices.placement(settings.device, settings.dtype)
    itemsize = torch.empty((), dtype=place.dtype).element_size()
    pool = ModelPool(
        [],
        loader,
        bytes_per_param=itemsize,
        kv_element=torch.empty((), dtype=planned_kv_dtype(settings.engine, place)).element_size(),
        kv_tokens=settings.kv_cache_tokens,
        seqs=settings.max_num_seqs,
        budget_mb=settings.models_memory_mb,
        quantization=settings.quantization,
        admin=lambda key: is_admin(key, settings.serving),
    )
    return pool


def build_pool(
    settings: cfg.Settings, service: ChatService | None = None, extras: Sequence[ExtraModel] = ()
) -> ModelPool:
    """The ModelPool of `settings`' models, with `service` (built from the first) already loaded in it."""
    pool = new_pool(settings, extras)
    candidates = model_candidates(settings, extras)
    pool.set_candidates(candidates)
    if service is not None:
        pool.add(candidates[0].id, service)
    return pool


def load_first(settings: cfg.Settings, pool: ModelPool, extras: Sequence[ExtraModel] = ()) -> Progress:
    """Start loading the model the server was started for, through the pool: a request for it meanwhile waits on
    this load (503, "is loading") instead of starting a second one. No memory check: it is the server's model.
    Returns the load's Progress."""
    pool.set_candidates(model_candidates(settings, extras))
    return pool.load(next(iter(pool.candidates)), make_current=True, check_memory=False)
