"""The page's chat as an MCP tool (`--mcp`): Gradio's own MCP server over a Blocks of one stateless endpoint.

The page's own endpoints (`/chat`, `/regenerate`, ...) carry the conversation in `gr.State`, which an MCP client
cannot hold, so they are not offered as tools: a separate Blocks with a single `gr.api` function is mounted at
`/mcp`, and Gradio serves it as a tool at `/mcp/gradio_api/mcp/` (streamable HTTP). The tool builds the same
request body the API parses and runs it through the page's `ChatBackend` over the server's request policy, so an
MCP call gets the API's validation, admission, limits, timeout, moderation, metrics and access line (entry
"mcp"). Credentials, when the server has any, are the API's bearer secrets, checked before Gradio sees the
request (app.py puts `engine/http/auth.py`'s `PrefixGuard` on PATH).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import gradio as gr

from engine.protocol.errors import ApiError
from engine.serving.policy import CallContext, RequestPolicy
from playground.client.backend import LocalBackend

PATH = "/mcp"  # where the tool's Blocks is mounted; the MCP endpoint is PATH + "/gradio_api/mcp/"
ENDPOINT = PATH + "/gradio_api/mcp/"


# (headers, address) -> (the per-client key, whether the caller may load a model): who calls, as the API says it.
Identify = Callable[[Mapping[str, str], str | None], tuple[str, bool]]


def chat_tool(policy: RequestPolicy, identify: Identify) -> Any:
    """The tool function over `policy`; its docstring and type hints are what MCP clients see. `identify` knows a
    caller as the API does: its bearer credential (else its address) for the per-client limit, and whether that
    credential is an admin's (loading a model the tool's `model` names)."""
    backend = LocalBackend(policy=policy)

    def context(request: gr.Request | None) -> CallContext:
        headers = dict(request.headers) if request is not None else {}
        host = getattr(getattr(request, "client", None), "host", None)
        client, may_load = identify(headers, host)
        return CallContext(client, "mcp:chat", "v1", "mcp", may_load=may_load)

    async def chat(
        message: str,
        system: str = "",
        max_tokens: int = 256,
        temperature: float = 0.7,
        top_p: float = 1.0,
        seed: int = -1,
        model: str = "",
        request: gr.Request = None,  # type: ignore[assignment]  # Gradio fills it; not a tool parameter
    ) -> str:
        """Ask the chat model of this playground one question and get its reply (one turn, no history).

        Args:
            message: The user's message.
            system: An optional system prompt.
            max_tokens: The most tokens to generate (the server's cap applies).
            temperature: Sampling temperature; 0 is greedy.
            top_p: Nucleus sampling mass, in (0, 1].
            seed: A seed for reproducible sampling; -1 for none.
            model: A served model or LoRA adapter id from /v1/models; empty for the default model.

        Returns:
            The model's reply text.
        """
        messages = [*([{"role": "system", "content": system}] if system else []), {"role": "user", "content": message}]
        params: dict[str, Any] = {"max_tokens": max_tokens, "temperature": temperature, "top_p": top_p}
        if seed >= 0:
            params["seed"] = seed
        try:
            if model:
                params["model"] = model
            result = await backend.achat(messages, ctx=context(request), **params)
        except ApiError as exc:
            raise gr.Error(exc.message) from exc
        return result.reply

    return chat


def build(policy: RequestPolicy, identify: Identify) -> gr.Blocks:
    """A Blocks with no components: only the tool's endpoint, which Gradio's MCP server lists as `chat`."""
    with gr.Blocks(title="LLM Playground", analytics_enabled=False) as blocks:
        gr.api(chat_tool(policy, identify), api_name="chat", queue=False)  # not queued: called in-process
    return blocks


def mount(app: Any, policy: RequestPolicy, identify: Identify) -> Any:
    """Serve the tool at PATH on the API's app (before the page, which is mounted at / and would shadow it)."""
    blocks = build(policy, identify)
    app = gr.mount_gradio_app(app, blocks, path=PATH, mcp_server=True, footer_links=[])
    if blocks.mcp_server_obj is None:  # Gradio logs and carries on; a server asked for MCP must not
        raise SystemExit(
            f"--mcp: {blocks.mcp_error or 'Gradio could not start its MCP server'} "
            "(the `mcp` package is in requirements.txt)"
        )
    return app
