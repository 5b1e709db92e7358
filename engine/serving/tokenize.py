"""The rendered prompt and its tokens (issue 19): what `POST /tokenize`, `POST /detokenize` and the page's Prompt
view answer, over one ChatService.

A chat form is rendered by the chat's own steps, in the chat's order (ChatService._prepare): media prepared (audio
transcribed where the server transcribes it), the reasoning plan's `enable_thinking`, `prompt.render_prompt` (the
template, tools, chat_template_kwargs), the tokenizer as `prompt.tokenize` calls it, then the media placeholders
expanded by `MediaPreparer.model_inputs`. So the ids are the ones a chat request with these messages would
prefill. Unlike chat, a text prompt longer than the model's limit is counted, not refused (vLLM's /tokenize
answers `count` and `max_model_len` for the client to compare); an expanded media prompt meets chat's limit.
"""

from __future__ import annotations

import asyncio
from typing import Any

from engine.protocol.errors import RequestValidationError
from engine.protocol.request import ChatCompletionRequest
from engine.protocol.tokenize import (
    DetokenizeRequest,
    TokenizeChatRequest,
    TokenizeRequest,
    check_token_ids,
)
from engine.serving import prompt as prompts
from engine.serving.service import ChatService


def check_model(svc: ChatService, model: str | None) -> None:
    """`model` is optional on these routes (vLLM's); when given it must be the served one."""
    if model is not None and model != svc.served_name:
        raise RequestValidationError(f"Model not found: {model[:64]!r}.")


def special_ids(svc: ChatService) -> set[int]:
    """The tokenizer's special tokens and its added tokens (`<think>`, `<tool_call>`, `<|im_start|>`, media
    placeholders): the control tokens a template writes, which the view marks."""
    tok = svc.tokenizer
    ids = set(getattr(tok, "all_special_ids", None) or [])
    ids |= set((getattr(tok, "get_added_vocab", dict)() or {}).values())
    return ids


async def render_chat(
    svc: ChatService, req: ChatCompletionRequest, add_generation_prompt: bool = True, continue_final: bool = False
) -> tuple[str, list[int], list[int], Any]:
    """(prompt text, ids as templated, ids as the model sees them, the media report or None) of a chat request.
    `continue_final`: rendered without the generation prompt and cut after the final message's text, so it is
    open-ended (vLLM's continue_final_message)."""
    media = await svc.media.prepare(req, svc.model.modalities)
    req = media.request
    thinking = svc.reasoning.plan(req).thinking
    text = await prompts.render_prompt_async(
        req, svc.tokenizer, svc.settings, thinking, svc.model.modalities, add_generation_prompt, continue_final
    )
    templated = await asyncio.to_thread(_encode, svc, text, False)
    ids, report = templated, None
    if media.kept:
        ids, _, report = await asyncio.to_thread(
            svc.media.model_inputs, templated, media, svc.processors, svc.model.context_length
        )
    return text, templated, ids, report


def _encode(svc: ChatService, text: str, add_special_tokens: bool) -> list[int]:
    # As prompt.tokenize: the template already wrote the special tokens (unless the client asks for them again).
    return list(svc.tokenizer(text, add_special_tokens=add_special_tokens)["input_ids"])


async def tokenize(svc: ChatService, req: TokenizeRequest) -> dict[str, Any]:
    """vLLM's TokenizeResponse: {count, max_model_len, tokens, token_strs}; with `return_details`, `details`."""
    check_model(svc, req.model)
    media: list[dict[str, Any]] = []
    if isinstance(req, TokenizeChatRequest):
        chat = req.chat.model_copy(update={"model": svc.served_name})
        text, templated, ids, report = await render_chat(
            svc, chat, req.add_generation_prompt, req.continue_final_message
        )
        if req.add_special_tokens and report:
            raise RequestValidationError("Parameter add_special_tokens must be false for messages with media.")
        if req.add_special_tokens:  # vLLM's flag: the tokenizer's own specials on top of the template's
            ids = await asyncio.to_thread(_encode, svc, text, True)
        if report:
            media = media_spans(svc, templated, report)
    else:
        text = req.prompt
        ids = await asyncio.to_thread(_encode, svc, text, req.add_special_tokens)
    out: dict[str, Any] = {
        "count": len(ids),
        "max_model_len": svc.model.context_length,
        "tokens": ids,
        "token_strs": None,
    }
    if req.return_token_strs:
        out["token_strs"] = [str(s) for s in svc.tokenizer.convert_ids_to_tokens(ids)]
    if req.return_details:
        out["details"] = details(svc, text, ids, media)
    return out


def details(svc: ChatService, text: str, ids: list[int], media: list[dict[str, Any]]) -> dict[str, Any]:
    """The page's extension: the rendered text, each token's decoded piece and special flag, the media spans,
    the prompt limit chat applies, and the counts."""
    special = special_ids(svc)
    pieces, flags = [], []
    for token in ids:
        pieces.append(svc.formatter.token(token, False)[0])
        flags.append(token in special)
    return {
        "text": text,
        "pieces": pieces,
        "special": flags,
        "media": media,
        "special_count": sum(flags),
        "media_tokens": sum(m["count"] for m in media),
        "characters": len(text),
        "prompt_limit": prompts.prompt_limit(svc.settings, svc.model.context_length),
    }


def media_spans(svc: ChatService, templated: list[int], report: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Where each media part's placeholder sits in the expanded ids, and how many tokens it became: the report
    (engine/serving/media_parts.py) is in the order of the parts, which is the order of their placeholders."""
    procs = svc.processors
    kinds = {token: kind for kind, token in (getattr(procs, "token_ids", None) or {}).items()}
    queue: dict[str, list[dict[str, Any]]] = {}
    for item in report:
        queue.setdefault(item["type"], []).append(item)
    spans, at = [], 0
    for token in templated:
        kind = kinds.get(token)
        if kind is None or not queue.get(kind):
            at += 1
            continue
        item = queue[kind].pop(0)
        spans.append(
            {
                "type": kind,
                "message": item["message"],
                "part": item["part"],
                "token": token,
                "piece": svc.formatter.token(token, False)[0],
                "start": at,
                "count": item["tokens"],
            }
        )
        at += item["tokens"]
    return spans


async def detokenize(svc: ChatService, req: DetokenizeRequest) -> dict[str, Any]:
    """vLLM's DetokenizeResponse: {prompt}, special tokens kept (as vLLM decodes)."""
    check_model(svc, req.model)
    check_token_ids(req.tokens, len(svc.tokenizer))
    text = await asyncio.to_thread(svc.tokenizer.decode, req.tokens, skip_special_tokens=False)
    return {"prompt": text}
