"""Where a warm start's CPU seconds go: each stage of app.py's start run in sequence in one process, with its CPU
seconds (`time.process_time()`, all threads) and wall seconds, in the server's order (API first, issue 30): what
comes before /health 200 (torch, the pool, the API, the registry, transformers, `build_service`), then the page
(Gradio's import, the page's build and mount), which the server does once the model has loaded.

    .venv/bin/python bench/start_stages.py [app.py flags, e.g. --quantization none]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
CPU0, WALL0 = time.process_time(), time.perf_counter()
last = [CPU0]


def mark(stage: str) -> None:
    now = time.process_time()
    print(f"{stage:<40} {now - last[0]:6.2f} CPU s (total {now - CPU0:6.2f}, wall {time.perf_counter() - WALL0:6.1f})")
    last[0] = now


def main() -> None:
    import engine  # noqa: F401  (the process settings that precede torch)

    mark("import engine")
    import torch  # noqa: F401

    mark("import torch")
    import app

    settings = app.settings_from(sys.argv[1:])
    app.configure_process(settings)
    mark("import app, settings")
    pool = app.new_pool(settings)
    mark("the pool (the engine's modules)")
    policy = app.policy_for(settings, pool=pool)
    api = app.create_api(settings, policy)
    import uvicorn  # noqa: F401

    mark("the API and uvicorn")
    candidates = app.model_candidates(settings)
    mark("the registry (model_candidates)")
    from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: F401
    from transformers.models.llama import modeling_llama  # noqa: F401

    mark("import transformers (Auto*, llama)")
    service = app.build_service(settings.replace(served_model_name=candidates[0].id))
    mark("build_service (weights, runner, engine)")
    print(f"{'before /health 200':<40} {time.process_time() - CPU0:6.2f} CPU s")
    import gradio  # noqa: F401

    mark("import gradio")
    app.mount_page(api, settings, policy)
    mark("the page (build and mount)")
    service.engine.shutdown()


if __name__ == "__main__":
    main()
