"""A ChatService built from settings: the model loaded, its runner, prefix cache, LoRA adapters and engine started.

Every front end shares the service this builds (the server through the model pool, a notebook, a test, bench/);
building one changes nothing process-wide (the composition root, app.py, sizes the thread pools). `preflight`
refuses what cannot work before a server binds its port."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from engine import config as cfg
from engine import device as devices

if TYPE_CHECKING:  # imported where a service is built: `preflight` runs before app.py sets the hub's variables
    from engine.serving.service import ChatService

log = logging.getLogger("playground")


def preflight(settings: cfg.EngineSettings) -> None:
    """What can be checked before the model loads: the adapters' files and format (their fit to the base model once
    it has loaded), and a device that has graphs when `--graph-capture` asks for them. Raises ValueError."""
    from engine.core.lora import preflight as lora_preflight

    lora_preflight(settings.lora_adapters, settings.served_model_name)
    if settings.graph_capture:  # a device without graphs is refused before anything starts
        try:
            devices.graph_api(devices.resolve_device(settings.device))
        except RuntimeError as exc:
            raise ValueError(str(exc)) from None


def build_service(settings: cfg.Settings, progress: Any = None) -> ChatService:
    """Load the model and start the engine; returns the ChatService every front end shares. `progress(fraction,
    stage)` hears how far it got (the page's progress bar while a model loads on demand).

    Changes nothing process-wide (a notebook's kernel or a test calls it too): app.py's `main()` sizes the thread
    pools."""
    import torch

    from engine import models
    from engine.core.calibration_cache import CalibrationCache
    from engine.core.engine import Engine, EngineLimits
    from engine.core.kv import PAGE
    from engine.core.model_runner import make_runner
    from engine.core.prefix_cache import PrefixCache
    from engine.core.speculative import STEP_ROWS
    from engine.serving.service import ChatService, ModelInfo

    eng = settings.engine  # what builds the engine; the service takes the serving part

    place = devices.placement(eng.device, eng.dtype)
    log.info("device %s, dtype %s, %d threads", place.device, place.dtype_name, torch.get_num_threads())
    report = progress or (lambda fraction, stage: None)
    report(0.05, "reading the weights")
    started = time.perf_counter()
    loaded = models.load(eng.model, models.cache_root(eng.cache_dir), place.device, place.dtype)
    log.debug("weights of %s read in %.1f s", loaded.name, time.perf_counter() - started)  # the pool logs the load
    context = min(eng.max_model_len or loaded.context_length, loaded.context_length)
    eos = {loaded.tokenizer.eos_token_id} if loaded.tokenizer.eos_token_id is not None else set()
    gen_eos = loaded.generation_config.get("eos_token_id")
    eos |= set(gen_eos if isinstance(gen_eos, list) else [gen_eos] if gen_eos is not None else [])
    limits = EngineLimits(
        max_num_seqs=eng.max_num_seqs,
        kv_cache_tokens=eng.kv_cache_tokens,
        max_queue=eng.max_queue,
        max_model_len=context,
        max_batched_tokens=eng.max_batched_tokens,
        adaptive_threads=eng.adaptive_threads,
        step_log=eng.step_log,
        speculative_ngram=eng.speculative_ngram,
    )
    report(0.7, "starting the engine")
    # The pool has room for the budget plus a partly filled last page per sequence (the device's page size).
    page = devices.page_size(place.device)  # at most the runner's (smaller for a head_dim above 128)
    runner = make_runner(
        loaded.model,
        place.device,
        eng.kv_cache_tokens + page * (eng.max_num_seqs + 1),
        seqs=eng.max_num_seqs,
        step_tokens=eng.max_batched_tokens + STEP_ROWS,
        quantization=eng.quantization,
        gguf=loaded.gguf,
        kv_cache_dtype=eng.kv_cache_dtype,
        calibration=CalibrationCache(models.cache_root(eng.cache_dir)),  # kernel choices: timed once, kept
    )
    cache = PrefixCache(eng.prefix_cache_tokens, getattr(runner, "page", PAGE))  # a block is one page
    if eng.graph_capture:  # decode steps captured per batch-size bucket (engine/core/graphs.py)
        from engine.core.model_runner import DecoderRunner

        if not isinstance(runner, DecoderRunner):
            raise RuntimeError(
                f"{cfg.cli_flag('graph_capture')}: {loaded.name} runs on the HF forward, not the lean runner"
            )
        runner.enable_graphs(devices.graph_api(place.device), eng.max_num_seqs, context)
    adapters = load_adapters(eng, runner)
    core = Engine(runner, loaded.tokenizer, eos, limits, place.device, cache)
    core.start()
    info = ModelInfo(
        eng.served_model_name or loaded.name,
        context,
        loaded.generation_config,
        loaded.model.config.model_type,
        loaded.model.get_output_embeddings().weight.shape[0],
        loaded.modalities,
        loaded.plain_template,
        sum(p.numel() for p in loaded.model.parameters()),
    )
    return ChatService(core, loaded.tokenizer, info, settings.serving, place.device, loaded.processors, adapters)


def load_adapters(settings: cfg.EngineSettings, runner: Any) -> dict[str, int]:
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
