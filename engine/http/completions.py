"""POST /v1/completions (OpenAI's legacy route as vLLM serves it): body cap and parsing, then each prompt through
the one request policy (engine/serving/completions.py), then the `text_completion` response or stream.

A non-stream answer is `fold` of the stream, as on the chat route; the writers here only reshape choices into the
completions form (`text`, the completions logprobs object, `echo`, per-choice `prompt_logprobs`). The usage and
MindIE's statistics are the chat route's (wire.usage_json). docs/completions.md is the contract.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse, Response

from engine.config import HttpSettings
from engine.http.auth import cache_scope, client_key
from engine.http.chat import _Stream, _unless_disconnected, decode_json, fold_unless_disconnected, read_body
from engine.http.error_bodies import error_body
from engine.http.sse import sse
from engine.http.wire import usage_json
from engine.protocol.completions import CompletionRequest, parse_completion_request
from engine.protocol.errors import ApiError, IncompleteGenerationError
from engine.protocol.response import ChatCompletionChunk, LogprobEntry
from engine.serving.completions import CompletionStream, Prompt, prompts_for
from engine.serving.policy import CallContext, RequestPolicy
from engine.serving.rights import is_admin

log = logging.getLogger(__name__)
COMPLETIONS_PATH = "/v1/completions"


class CompletionRoutes:
    def __init__(self, settings: HttpSettings, policy: RequestPolicy, body_limit: int) -> None:
        self.settings = settings
        self.policy = policy
        self.body_limit = body_limit

    async def handle(self, request: Request, credential: str | None) -> Response:
        host = request.client.host if request.client else None
        ctx = CallContext(
            client_key(credential, host),
            COMPLETIONS_PATH,
            "v1",
            "api",
            may_load=is_admin(credential, self.settings),
            cache_scope=cache_scope(credential, self.settings),
        )
        creq = parse_completion_request(decode_json(await read_body(request, self.body_limit)))
        svc = self.policy.service_for(creq, ctx)
        prompts = await asyncio.to_thread(prompts_for, creq, svc)
        access = request.state.access = {}
        run = await _unless_disconnected(request, self.policy.run(prompts[0].request, ctx, access))
        if run is None:
            return Response(status_code=499)
        stream = CompletionStream(self.policy, ctx, prompts, creq.n, run, access)
        headers = {"X-Request-Id": access["id"]}
        shaper = Shaper(creq, prompts, stream, self.settings.perf_stats)
        if not creq.stream:
            resp = await fold_unless_disconnected(request, stream)
            return JSONResponse(shaper.response(resp), headers=headers)
        opts = prompts[0].request.stream_options
        include_usage = bool(opts and opts.include_usage)

        async def events() -> AsyncIterator[bytes]:
            try:
                async for chunk in stream:
                    out = shaper.chunk(chunk, include_usage)
                    if out is not None:
                        yield sse({**out, **getattr(chunk, "top_level", {})})
            except ApiError as exc:
                yield sse(error_body("v1", exc)[1])
            except Exception:  # a fatal error after the status line is one error event, then the end
                log.exception("stream failed")
                yield sse(error_body("v1", IncompleteGenerationError("Generation failed."))[1])
            finally:
                stream.close()
            yield sse("[DONE]")

        headers["Cache-Control"] = "no-cache"
        return _Stream(events(), stream.close, media_type="text/event-stream; charset=utf-8", headers=headers)


@dataclass
class Shaper:
    """Chat choices -> completions choices: echo, the completions logprobs object, per-choice prompt_logprobs."""

    creq: CompletionRequest
    prompts: list[Prompt]
    stream: CompletionStream
    perf_stats: bool
    _started: set[int] = field(default_factory=set)
    _offsets: dict[int, int] = field(default_factory=dict)

    def _prompt_of(self, index: int) -> int:
        return index // self.creq.n

    def _asked_prompt_logprobs(self) -> int | None:
        return self.creq.chat_fields.get("prompt_logprobs")

    def _prompt_logprobs(self, index: int) -> list[Any] | None:
        """The choice's prompt_logprobs as asked: the prompt's own token and the `prompt_logprobs` best others
        (the engine may have scored more for `echo` with `logprobs`)."""
        k = self._asked_prompt_logprobs()
        if k is None:
            return None
        entries = self.stream.prompt_logprobs.get(self._prompt_of(index)) or []
        out: list[Any] = []
        for e in entries:
            if e is None:
                out.append(None)
                continue
            actual = next(iter(e))
            out.append({t: v for t, v in e.items() if t == actual or v["rank"] <= k})
        return out

    def _echo_logprobs(self, index: int) -> dict[str, list[Any]]:
        """The prompt's part of the logprobs object: its tokens, the first one's logprob null."""
        prompt = self.prompts[self._prompt_of(index)]
        entries = self.stream.prompt_logprobs.get(self._prompt_of(index)) or [None] * len(prompt.ids)
        k = self.creq.logprobs or 0
        out: dict[str, list[Any]] = {"tokens": [], "token_logprobs": [], "top_logprobs": []}
        for text, e in zip(prompt.tokens, entries):
            out["tokens"].append(text)
            if e is None:
                out["token_logprobs"].append(None)
                out["top_logprobs"].append(None)
                continue
            actual = next(iter(e.values()))
            out["token_logprobs"].append(actual["logprob"])
            top = {v["decoded_token"]: v["logprob"] for v in e.values() if v["rank"] <= k}
            out["top_logprobs"].append({actual["decoded_token"]: actual["logprob"], **top})
        return out

    @staticmethod
    def _token_logprobs(entries: list[LogprobEntry]) -> dict[str, list[Any]]:
        return {
            "tokens": [e.token for e in entries],
            "token_logprobs": [e.logprob for e in entries],
            "top_logprobs": [{e.token: e.logprob, **{t.token: t.logprob for t in e.top_logprobs}} for e in entries],
        }

    def _logprobs(self, index: int, first: bool, entries: list[LogprobEntry]) -> dict[str, list[Any]] | None:
        if self.creq.logprobs is None:
            return None
        parts = [self._echo_logprobs(index)] if first and self.creq.echo else []
        parts.append(self._token_logprobs(entries))
        out: dict[str, list[Any]] = {"text_offset": [], "token_logprobs": [], "tokens": [], "top_logprobs": []}
        at = self._offsets.get(index, 0)
        for part in parts:
            for key in ("tokens", "token_logprobs", "top_logprobs"):
                out[key] += part[key]
            for token in part["tokens"]:
                out["text_offset"].append(at)
                at += len(token)
        self._offsets[index] = at
        return out

    def _echo(self, index: int) -> str:
        return self.prompts[self._prompt_of(index)].text if self.creq.echo else ""

    def response(self, resp: Any) -> dict[str, Any]:
        choices = []
        for c in resp.choices:
            entries = c.logprobs.content if c.logprobs is not None else []
            choice = {
                "index": c.index,
                "text": self._echo(c.index) + c.message.content,
                "logprobs": self._logprobs(c.index, True, entries),
                "finish_reason": c.finish_reason,
                "stop_reason": c.stop_reason,
                "prompt_logprobs": self._prompt_logprobs(c.index),
            }
            choices.append(choice)
        out: dict[str, Any] = {
            "id": resp.id,
            "object": "text_completion",
            "created": resp.created,
            "model": resp.model,
            "choices": choices,
            "usage": usage_json(resp.usage, self.perf_stats),
        }
        if resp.moderation_result is not None:
            out["moderation_result"] = resp.moderation_result
        if self.perf_stats:
            out["prefill_time"] = resp.prefill_time or 0
            out["decode_time_arr"] = resp.decode_time_arr or []
        return out

    def chunk(self, chunk: ChatCompletionChunk, include_usage: bool) -> dict[str, Any] | None:
        head = {"id": chunk.id, "object": "text_completion", "created": chunk.created, "model": chunk.model}
        if not chunk.choices:
            if not include_usage or chunk.usage is None:
                return None
            return {**head, "choices": [], "usage": usage_json(chunk.usage, self.perf_stats)}
        (c,) = chunk.choices
        tokens = chunk.timeline is not None and bool(chunk.timeline.token_ids)
        opening = c.delta.content == "" and c.logprobs is None and c.finish_reason is None and not tokens
        if opening and not chunk.replaces:
            return None  # a choice's first words come with its first tokens (the prompt's logprobs are known then)
        first = c.index not in self._started
        self._started.add(c.index)
        text = (self._echo(c.index) if first else "") + (c.delta.content or "")
        entries = c.logprobs.content if c.logprobs is not None else []
        choice: dict[str, Any] = {
            "index": c.index,
            "text": text,
            "logprobs": self._logprobs(c.index, first, entries),
            "finish_reason": c.finish_reason,
            "stop_reason": c.stop_reason if c.finish_reason is not None else None,
        }
        if first and self._asked_prompt_logprobs() is not None:
            choice["prompt_logprobs"] = self._prompt_logprobs(c.index)
        return {**head, "choices": [choice]}
