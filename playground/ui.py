"""The first playground page: a streaming chat on the same in-process ChatService the API uses.

The UI builds the same request the API parses (`parse_chat_request`) and renders only from the service's
chunks; it never touches the tokenizer, the template or the model itself.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import gradio as gr

from engine.openai.errors import ApiError
from engine.openai.request import parse_chat_request
from playground.render import ReplyView


def build_request(history: list[dict[str, Any]], system: str, model: str, controls: dict[str, Any]) -> dict[str, Any]:
    messages = [{"role": "system", "content": system}] if system.strip() else []
    messages += [{"role": m["role"], "content": m["content"]} for m in history if isinstance(m.get("content"), str)]
    body: dict[str, Any] = {"model": model, "messages": messages, "stream": True}
    body.update({k: v for k, v in controls.items() if v is not None})
    return body


def _seed(text: str) -> int | str | None:
    """Empty = random; anything else goes to validation as typed, so a bad seed gets the API's message."""
    text = text.strip()
    if not text:
        return None
    return int(text) if text.lstrip("-").isdigit() else text


def build_ui(get_service: Callable[[], Any]) -> gr.Blocks:
    with gr.Blocks(title="LLM Playground") as demo:
        gr.Markdown("## LLM Playground\nChat with the embedded engine. The same engine serves `/v1/chat/completions`.")
        with gr.Row():
            with gr.Column(scale=3):
                chatbot = gr.Chatbot(label="Chat", height=460)
                with gr.Row():
                    box = gr.Textbox(placeholder="Type a message and press Enter", show_label=False, scale=5)
                    send = gr.Button("Send", variant="primary", scale=1)
                    stop = gr.Button("Stop", scale=1)
                clear = gr.Button("Clear")
            with gr.Column(scale=2):
                system = gr.Textbox(label="System prompt", lines=2)
                temperature = gr.Slider(0.0, 2.0, value=0.7, step=0.05, label="temperature (0 = greedy)")
                top_p = gr.Slider(0.01, 1.0, value=1.0, step=0.01, label="top_p")
                top_k = gr.Number(value=-1, precision=0, label="top_k (-1 = off)")
                max_tokens = gr.Slider(1, 512, value=128, step=1, label="max_tokens")
                seed = gr.Textbox(value="", label="seed (empty = random)", max_lines=1)
                stats = gr.Markdown("", elem_id="stats")

        async def respond(message: str, history: list[dict[str, Any]], system_prompt: str, temp: float,
                          tp: float, tk: float, mt: float, sd: str) -> AsyncIterator[tuple]:  # fmt: skip
            service = get_service()
            if not message.strip():
                yield history, "", gr.update()
                return
            history = history + [{"role": "user", "content": message}]
            if service is None:
                yield history + [{"role": "assistant", "content": "The model is still loading…"}], "", ""
                return
            controls = {"temperature": temp, "top_p": tp, "top_k": int(tk) if tk is not None else None,
                        "max_tokens": int(mt), "seed": _seed(sd)}  # fmt: skip
            view = ReplyView()
            try:
                req = parse_chat_request(build_request(history, system_prompt, service.served_name, controls))
                gen = await service.start(req)
                async for chunk in gen:
                    if view.add(chunk):
                        yield history + [view.message()], "", view.stats_markdown()
            except ApiError as exc:
                view.error = exc.message
            yield history + [view.message()], "", view.stats_markdown()

        inputs = [box, chatbot, system, temperature, top_p, top_k, max_tokens, seed]
        ev1 = box.submit(respond, inputs, [chatbot, box, stats], api_name="chat")
        ev2 = send.click(respond, inputs, [chatbot, box, stats], api_name=False)
        stop.click(None, None, None, cancels=[ev1, ev2])
        clear.click(lambda: ([], ""), None, [chatbot, stats])
    return demo
