"""Request -> prompt token ids: message normalisation, chat template, tokenisation, length limits."""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import Callable
from typing import Any

from engine.config import ServingSettings
from engine.protocol.errors import RequestValidationError
from engine.protocol.request import ChatCompletionRequest
from engine.protocol.tools import NamedToolChoice
from engine.serving import templates


def template_source(req: ChatCompletionRequest, tokenizer: Any, settings: ServingSettings) -> str:
    if req.chat_template is not None:
        return templates.resolve_source(
            req.chat_template, settings.chat_template_allow_path, settings.chat_template_dir
        )
    source = getattr(tokenizer, "chat_template", None)
    if isinstance(source, dict):
        source = source.get("default")
    if not source:
        raise RequestValidationError("This model has no chat template; send one in the request's chat_template field.")
    return source


def render_prompt(
    req: ChatCompletionRequest,
    tokenizer: Any,
    settings: ServingSettings,
    enable_thinking: bool | None = None,
    media: frozenset[str] = frozenset(),
    add_generation_prompt: bool = True,
    continue_final: bool = False,
) -> str:
    """`media`: modalities whose parts the template gets as parts (the model takes them); others are refused.
    `add_generation_prompt=False`: the conversation alone, without the assistant turn's opening (/tokenize).
    `continue_final`: without the opening, and cut after the final message's text, so the reply continues it
    (vLLM's continue_final_message)."""
    messages = req.text_only_messages(media)
    limit = settings.max_request_length_mb << 20
    size = len(
        json.dumps([m.model_dump(exclude_none=True) for m in req.messages], separators=(",", ":"), ensure_ascii=False)
    )
    if size > limit:
        raise RequestValidationError(f"Serialized messages must be at most {limit} characters, got {size}.")
    variables: dict[str, Any] = dict(req.chat_template_kwargs)
    if enable_thinking is not None:  # resolved: request, then tokenizer config, then the model's default
        variables["enable_thinking"] = enable_thinking
    variables.update(
        messages=messages,
        add_generation_prompt=add_generation_prompt and not continue_final,
        bos_token=getattr(tokenizer, "bos_token", None) or "",
        eos_token=getattr(tokenizer, "eos_token", None) or "",
    )
    if req.tools_active:  # spec §8.3: "none" renders no tools, a named choice only that tool
        named = req.tool_choice.function.name if isinstance(req.tool_choice, NamedToolChoice) else None
        variables["tools"] = [
            t.model_dump(exclude_none=True) for t in req.tools or [] if named is None or t.function.name == named
        ]
    kind: templates.Kind = "model" if req.chat_template is None else "request"
    text = templates.render(template_source(req, tokenizer, settings), variables, limit, kind)
    if continue_final:
        final = str(req.messages[-1].content)
        at = text.rfind(final)
        if at < 0:
            raise RequestValidationError(
                "The chat template does not write the final message's text as it is, so "
                "it cannot be continued (continue_final_message)."
            )
        text = text[: at + len(final)]
    return text


async def render_prompt_async(req: ChatCompletionRequest, *args: Any) -> str:
    """`render_prompt` on the template threads of its kind (templates.executor), not the default executor."""
    kind: templates.Kind = "model" if req.chat_template is None else "request"
    call = functools.partial(render_prompt, req, *args)
    return await asyncio.get_running_loop().run_in_executor(templates.executor(kind), call)


def prompt_limit(settings: ServingSettings, context_length: int) -> int:
    limit = context_length - 1
    if settings.max_input_tokens:
        limit = min(limit, settings.max_input_tokens)
    return min(limit, 1_048_576)


def tokenize(text: str, tokenizer: Any, settings: ServingSettings, context_length: int) -> list[int]:
    # The template already wrote the special tokens (BOS included where the model wants one).
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    check_length(len(ids), settings, context_length)
    return ids


def check_length(tokens: int, settings: ServingSettings, context_length: int) -> None:
    """Spec §2.3 on the prompt as the model sees it (again after media placeholders are expanded)."""
    limit = prompt_limit(settings, context_length)
    if not 0 < tokens <= limit:
        raise RequestValidationError(f"Messages token length must be in (0, {limit}], got {tokens}.")


SYSTEM_MARK = "\u2063system\u2063"  # text no template writes by itself: where a request's system prompt lands


def default_system_prompt(render: Callable[[ChatCompletionRequest], str]) -> str:
    """What a chat template writes in place of a system prompt when a request has none, found by rendering one user
    message with and without a marked system message: the same text around the marker, and something else where
    it was, is the template's own system prompt. "" when the template writes none (or renders differently)."""
    from engine.protocol.request import parse_chat_request

    user = {"role": "user", "content": "hi"}
    try:
        bare = render(parse_chat_request({"model": "m", "messages": [user]}))
        marked = render(
            parse_chat_request({"model": "m", "messages": [{"role": "system", "content": SYSTEM_MARK}, user]})
        )
    except RequestValidationError:  # the template refuses these messages (it needs more of them): nothing to show
        return ""
    if marked.count(SYSTEM_MARK) != 1:
        return ""
    before, after = marked.split(SYSTEM_MARK)
    if not bare.startswith(before) or not after:
        return ""
    rest = bare[len(before) :]
    end = rest.find(after)
    return rest[:end].strip() if end > 0 else ""
