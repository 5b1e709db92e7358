"""ChatService: the one code path from a validated request to response chunks.

Every front end reaches it through `RequestPolicy.run` (policy.py), which admits, limits, moderates and counts,
then calls `start()` and iterates the Generation (generation.py) it returns; `complete()` is nothing but the fold
of that stream, so streamed and non-streamed output cannot drift apart.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from engine.config import ServingSettings
from engine.core.engine import Engine
from engine.core.types import EngineError, EngineRequest, SamplingParams
from engine.parsers import select_parser
from engine.protocol.errors import RequestValidationError
from engine.protocol.request import ChatCompletionRequest, Route
from engine.protocol.response import ChatCompletionResponse
from engine.serving import prompt as prompts
from engine.serving.fold import fold
from engine.serving.generation import Generation, RequestFacts, map_engine_error
from engine.serving.logprobs import TokenFormatter
from engine.serving.media_parts import MediaPreparer, PreparedMedia
from engine.serving.media_preview import preview_media
from engine.serving.params import sampling_params
from engine.serving.reasoning import ReasoningPlan, ReasoningPolicy
from engine.serving.structured import ConstraintBuilder

# (model name, the request as its prompt reads, prompt tokens) -> None, or an exception that stops the request.
Screen = Callable[[str, ChatCompletionRequest, int], Awaitable[None]]


@dataclass
class ModelInfo:
    name: str
    context_length: int
    generation_config: dict[str, Any] = field(default_factory=dict)
    model_type: str = ""
    vocab_size: int = 0  # width of the model's logits
    modalities: frozenset[str] = frozenset()  # media the model takes itself ("image", "video", "audio")
    plain_template: bool = False  # a base model served with engine/serving/plain_template.jinja (the page says so)
    parameters: int = 0  # the model's parameter count (the page's default preset is chosen by size)


@dataclass
class _Prepared:
    request: ChatCompletionRequest  # media replaced by what the prompt takes
    media: PreparedMedia
    plan: ReasoningPlan
    ids: list[int]
    params: SamplingParams
    mm: dict[str, Any] | None = None  # media tensors for the model's prefill
    media_report: list[dict[str, Any]] | None = None  # per kept media part: type, tokens, frames sampled


def scope_salt(scope: str) -> bytes:
    """The prefix-cache salt of a cache scope (vLLM's cache_salt): it keys the first block, and through the chain of
    block digests every later one, so two scopes never share a cached prefix and `cached_tokens` cannot tell one
    client what another sent (issue 31). Fixed length, so it never runs into the media salt after it."""
    return b"scope:" + hashlib.sha256(scope.encode("utf-8", "surrogateescape")).digest() if scope else b""


class ChatService:
    def __init__(
        self,
        engine: Engine,
        tokenizer: Any,
        model: ModelInfo,
        settings: ServingSettings,
        device: str = "cpu",
        processors: Any = None,
        adapters: dict[str, int] | None = None,
    ) -> None:
        self.engine = engine
        self.processors = processors  # engine.multimodal.MediaProcessors of a multimodal model
        self.tokenizer = tokenizer
        self.model = model
        self.settings = settings
        self.formatter = TokenFormatter(tokenizer)
        self.reasoning = ReasoningPolicy(tokenizer, model.model_type, settings)
        self.media = MediaPreparer(settings, device)
        self.constraints = ConstraintBuilder(tokenizer, model.vocab_size or len(tokenizer), engine.eos_ids)
        self.served_name = settings.served_model_name or model.name
        self.adapters: dict[str, int] = dict(adapters or {})  # LoRA id -> the engine's adapter index (1..n)

    _default_system: str | None = None

    def input_modalities(self) -> list[str]:
        """What a request's content may carry for this model: text, the media the model takes itself, and audio
        when it is transcribed into text (`audio_transcription`, §2.4.1). Reported by /v1/models."""
        media = set(self.model.modalities) | ({"audio"} if self.settings.audio_transcription else set())
        return ["text", *(m for m in ("image", "video", "audio") if m in media)]

    def check_model(self, req: ChatCompletionRequest, route: Route) -> str:
        if route == "pangu_v1":
            return self.served_name
        if req.model != self.served_name and req.model not in self.adapters:
            raise RequestValidationError(f"Model not found: {str(req.model)[:64]!r}.")
        return req.model

    async def start(
        self, req: ChatCompletionRequest, route: Route = "v1", screen: Screen | None = None, cache_scope: str = ""
    ) -> Generation:
        """Validate against the model and server, submit to the engine, and wait for its first answer. `screen`
        sees a request whose media became text (transcripts) before the engine does, and may raise to stop it.
        `cache_scope`: whose cached prompt prefixes this request may reuse and add to (CallContext.cache_scope)."""
        accepted = time.perf_counter()
        model, prepared = await self._prepare(req, route)
        if screen is not None and prepared.media.transcripts:
            await screen(model, prepared.request, len(prepared.ids))
        req, media, plan, ids, params = (prepared.request, prepared.media, prepared.plan, prepared.ids, prepared.params)
        tool_parser = await asyncio.to_thread(self.tool_parser_for, req) if req.tools_active else None
        constraint = await asyncio.to_thread(self.constraints.for_request, req)
        prefix = "cmpl-" if req._prompt_ids is not None else "chatcmpl-" if route == "v1" else "chat-"
        request_id = prefix + uuid.uuid4().hex
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue = asyncio.Queue()

        def sink(item: Any) -> None:
            try:
                loop.call_soon_threadsafe(queue.put_nowait, item)
            except RuntimeError:  # the caller's loop is closed (its asyncio.run ended): nobody reads this any more
                self.engine.abort(request_id)

        submitted = time.perf_counter()
        try:
            adapter = self.adapters.get(model, 0)  # a LoRA id: its rows run with it, its prefixes cached apart
            salt = scope_salt(cache_scope) + media.salt + (b"lora:" + model.encode() if adapter else b"")
            stats = self.engine.submit(
                EngineRequest(request_id, ids, params, salt, constraint, prepared.mm, adapter=adapter), sink
            )
        except EngineError as err:
            raise map_engine_error(err) from None
        facts = RequestFacts(
            request_id,
            int(time.time()),
            model,
            params,
            accepted,
            req.skip_special_tokens,
            plan.split,
            tool_parser,
            bool(req.stream),
            round((submitted - accepted) * 1000, 1),
            [t.as_json() for t in media.transcripts] or None,
            prepared.media_report,
        )
        gen = Generation(facts, stats, queue, self.engine.abort, self.formatter)
        try:
            await gen.first_answer()
        except asyncio.CancelledError:
            gen.abort()
            raise
        return gen

    def tool_parser_for(self, req: ChatCompletionRequest) -> str:
        """The tool-call parser for a request with active tools (spec §8.1), or the 'not supported' error."""
        source = prompts.template_source(req, self.tokenizer, self.settings)
        special = set(getattr(self.tokenizer, "get_added_vocab", dict)())
        name = select_parser(self.settings.tool_call_parser, source, self.model.model_type, special)
        if name is None:
            raise RequestValidationError("Parameter tools: tool calling is not supported by this model.")
        return name

    async def _prepare(self, req: ChatCompletionRequest, route: Route) -> tuple[str, _Prepared]:
        """Model check, media, reasoning plan, prompt and sampling parameters: what start() and
        count_prompt_tokens() both need, done one way."""
        model = self.check_model(req, route)
        if req._prompt_ids is not None:  # a legacy completion: its prompt as it is, no template, no reasoning split
            return model, self._raw_prompt(req)
        media = await self.media.prepare(req, self.model.modalities)
        req = media.request
        plan = self.reasoning.plan(req)
        if req.continue_final_message:  # the reply goes on with the final message's text: an answer, not reasoning
            plan = dataclasses.replace(plan, split=False)
        text = await prompts.render_prompt_async(
            req,
            self.tokenizer,
            self.settings,
            plan.thinking,
            self.model.modalities,
            req.add_generation_prompt,
            req.continue_final_message,
        )
        ids = await asyncio.to_thread(prompts.tokenize, text, self.tokenizer, self.settings, self.model.context_length)
        mm, report = None, None
        if media.kept and req.prompt_logprobs is not None:  # prefilled whole: every row of a long media prompt
            raise RequestValidationError("Parameter prompt_logprobs is not supported with media input.")
        if media.kept:
            ids, mm, report = await asyncio.to_thread(
                self.media.model_inputs, ids, media, self.processors, self.model.context_length
            )
        info, vocab = self.model, self.model.vocab_size or len(self.tokenizer)
        params = sampling_params(req, self.settings, len(ids), info.context_length, info.generation_config, vocab)
        if plan.split:
            params = dataclasses.replace(
                params, think_ids=plan.think_ids, thinking_budget=plan.budget, think_stop_ids=plan.budget_stop_ids
            )
        return model, _Prepared(req, media, plan, ids, params, mm, report)

    def _raw_prompt(self, req: ChatCompletionRequest) -> _Prepared:
        ids = list(req._prompt_ids or [])
        prompts.check_length(len(ids), self.settings, self.model.context_length)
        info, vocab = self.model, self.model.vocab_size or len(self.tokenizer)
        params = sampling_params(req, self.settings, len(ids), info.context_length, info.generation_config, vocab)
        return _Prepared(req, PreparedMedia(req), ReasoningPlan(thinking=None, split=False), ids, params)

    async def count_prompt_tokens(self, req: ChatCompletionRequest, route: Route = "v1") -> tuple[str, int]:
        """(model name, prompt tokens) after the same validation as start(), without generating: for a request
        that is answered without the engine (a question the moderation hook blocked)."""
        model, prepared = await self._prepare(req, route)
        return model, len(prepared.ids)

    async def complete(self, req: ChatCompletionRequest, route: Route = "v1") -> ChatCompletionResponse:
        gen = await self.start(req, route)
        return await fold(gen)

    async def preview_media(self, part: Any) -> dict[str, Any]:
        """What this server makes of one media part before it is sent: {kind, mime, bytes, frames, duration_s,
        width, height, error}, from the same checks and decode a request gets (engine/serving/media_preview.py)."""
        return (await preview_media(part, self.settings)).as_json()

    def default_system_prompt(self) -> str:
        """The system prompt the chat template writes when a request has none ("" when it writes none): SmolLM2's
        template adds its own, which the page shows in its System prompt box instead of "(none)"."""
        if self._default_system is None:
            self._default_system = prompts.default_system_prompt(self.render_for_debug)
        return self._default_system

    def render_for_debug(self, req: ChatCompletionRequest) -> str:
        """The exact prompt text a request renders to (the UI's 'show prompt')."""
        thinking = self.reasoning.plan(req).thinking
        return prompts.render_prompt(req, self.tokenizer, self.settings, thinking, self.model.modalities)
