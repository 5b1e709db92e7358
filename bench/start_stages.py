"""Where a warm start's CPU seconds go: each stage of app.py's start run in sequence in one process, with its CPU
seconds (`time.process_time()`, all threads) and wall seconds. The server runs the page and the model's load in
two threads; here they run one after the other, so each stage's cost stands alone.

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
    import gradio  # noqa: F401

    mark("import gradio")
    from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: F401
    from transformers.models.llama import modeling_llama  # noqa: F401

    mark("import transformers (Auto*, llama)")
    pool = app.new_pool(settings)
    candidates = app.model_candidates(settings)
    mark("pool and registry (model_candidates)")
    app.create_application(settings, app.policy_for(settings, pool=pool))
    mark("the API and the page")
    service = app.build_service(settings.replace(served_model_name=candidates[0].id))
    mark("build_service (weights, runner, engine)")
    service.engine.shutdown()


if __name__ == "__main__":
    main()
