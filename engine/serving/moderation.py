"""Pluggable moderation for `moderation_config` (spec §2.6), with a word-list hook as the example.

A hook is any object with `check(text, *, stage, config) -> Verdict`; `stage` is "question" (the prompt, before
generation) or "answer" (the output so far, checked per chunk). `--moderation-hook` names one as
`package.module:attribute` (an object with `check`, or a zero-argument factory returning one), or
`wordlist:FILE.json` for the built-in `WordListHook` over a JSON object of glossary name -> list of words.

The question is every message text the model will see, of any role (system, user, assistant, tool: content,
reasoning, names and tool-call arguments), plus the transcripts of audio the service turned into text; image,
video and audio the model takes itself are not text and go to the model as without a hook.

What the operator configured cannot be switched off by a client (spec §2.6): every question and every answer is
checked with `OPERATOR` (the hook's own lists, nothing relaxed) whatever the request says. A request's
`moderation_config` can only add to that: its `black_glossary_names` are checked in a second call with the
request's config, where its `white_glossary_names` and `question_moderation` / `answer_moderation` relax only
those added lists.

Without a hook nothing here runs and `moderation_config` has no effect. With one, a blocked question skips the
engine entirely; a blocked answer ends its choice (and the engine request once every choice is blocked). Either
way the client gets `finish_reason` "content_filter" and the hook's fallback reply: as the content of a
non-stream response, or in a stream as one interception chunk carrying `"suggestion": "block"` and `"reply"`
(Pangu's interception data unit) followed by the choice's closing chunk.
"""

from __future__ import annotations

import asyncio
import importlib
import json
from collections.abc import AsyncIterable, AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import Field

from engine.protocol.messages import Message
from engine.protocol.request import ChatCompletionRequest, ModerationConfig
from engine.protocol.response import ChatCompletionChunk, ChunkChoice, Delta, PromptTokensDetails, Usage

Stage = Literal["question", "answer"]
DEFAULT_REPLY = "Sorry, I can't help with that."
CONTENT_FILTER = "content_filter"


@dataclass(frozen=True)
class Verdict:
    blocked: bool
    reason: str = ""
    reply: str = DEFAULT_REPLY


PASS = Verdict(False)
OPERATOR = ModerationConfig()  # the operator's check: the hook's default lists, both stages, nothing relaxed


class ModerationHook(Protocol):
    def check(self, text: str, *, stage: Stage, config: ModerationConfig) -> Verdict: ...


class WordListHook:
    """Blocks text containing a listed word (case-insensitive). The "default" glossary always applies and nothing
    exempts its words; the request's `black_glossary_names` add glossaries, its `white_glossary_names` exempt the
    words they list from those added glossaries only. Unknown glossary names are ignored (§2.6)."""

    def __init__(self, glossaries: dict[str, list[str]], reply: str = DEFAULT_REPLY) -> None:
        self.glossaries = {name: [w.lower() for w in words if w] for name, words in glossaries.items()}
        self.reply = reply

    @classmethod
    def from_file(cls, path: str) -> WordListHook:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        if not isinstance(data, dict) or not all(
            isinstance(v, list) and all(isinstance(w, str) for w in v) for v in data.values()
        ):
            raise ValueError("a word-list file must be a JSON object of glossary name -> array of strings")
        return cls(data)

    def check(self, text: str, *, stage: Stage, config: ModerationConfig) -> Verdict:
        names = ["default", *(config.black_glossary_names or [])]
        allowed = {w for name in config.white_glossary_names or [] for w in self.glossaries.get(name, [])}
        low = text.lower()
        for name in names:
            for word in self.glossaries.get(name, []):
                if (name == "default" or word not in allowed) and word in low:
                    return Verdict(True, f"{stage} contains a word of glossary {name!r}", self.reply)
        return PASS


def load_hook(spec: str) -> ModerationHook | None:
    """`--moderation-hook` value -> hook (None when empty). Errors name the problem, for start-up."""
    if not spec:
        return None
    kind, sep, rest = spec.partition(":")
    if not sep or not rest:
        raise ValueError("--moderation-hook must be module:attribute or wordlist:FILE.json")
    if kind == "wordlist":
        return WordListHook.from_file(rest)
    target: Any = importlib.import_module(kind)
    for attr in rest.split("."):
        target = getattr(target, attr)
    hook = target() if isinstance(target, type) or not hasattr(target, "check") else target  # class or factory
    if not callable(getattr(hook, "check", None)):
        raise ValueError(f"--moderation-hook {spec}: the object has no check(text, stage=, config=) method")
    return hook


def question_text(messages: Sequence[Message]) -> str:
    """What the question check reads: each message's text, name, reasoning and tool calls, whatever its role."""
    parts: list[str] = []
    for m in messages:
        parts += [m.name or "", m.text, m.reasoning_content or ""]
        parts += [f"{call.function.name} {call.function.arguments}" for call in m.tool_calls or []]
    return "\n".join(part for part in parts if part)


class QuestionBlocked(Exception):
    """A question blocked only once its audio was transcribed: the prompt is built, nothing reached the engine."""

    def __init__(self, verdict: Verdict, model: str, prompt_tokens: int) -> None:
        super().__init__(verdict.reason)
        self.verdict, self.model, self.prompt_tokens = verdict, model, prompt_tokens


class InterceptionChunk(ChatCompletionChunk):
    """The interception data unit: a chunk whose delta carries the fallback reply, plus top-level fields that
    every wire writer copies as they are."""

    top_level: dict[str, Any] = Field(default_factory=dict, exclude=True)


def result_json(verdict: Verdict, stage: Stage) -> dict[str, Any]:
    """`moderation_result` (extension, with `show_result`)."""
    if not verdict.blocked:
        return {"suggestion": "pass"}
    return {"suggestion": "block", "stage": stage, "reason": verdict.reason}


@dataclass
class Moderator:
    """One request's moderation: the hook, the request's settings and what has been blocked so far."""

    hook: ModerationHook
    config: ModerationConfig
    blocked: dict[int, tuple[Verdict, Stage]] = field(default_factory=dict)  # choice index -> why

    async def check(self, text: str, stage: Stage) -> Verdict:
        """The operator's check (`OPERATOR`: never relaxed by the request), then the lists the request adds."""
        # A hook may do I/O; run it off the event loop so it never stalls other streams.
        verdict = await asyncio.to_thread(self.hook.check, text, stage=stage, config=OPERATOR)
        if verdict.blocked or not self._adds_lists(stage):
            return verdict
        return await asyncio.to_thread(self.hook.check, text, stage=stage, config=self.config)

    def _adds_lists(self, stage: Stage) -> bool:
        """Whether the request asks for more than the operator's check at this stage (its black lists)."""
        wanted = self.config.question_moderation if stage == "question" else self.config.answer_moderation
        return wanted and bool(self.config.black_glossary_names)

    async def check_question(self, messages: Sequence[Message]) -> Verdict:
        """Every message text the model will see, of any role; media parts are not text and are left to the model
        (the words of transcribed audio are text parts once the service has put them in, see `screen`)."""
        return await self.check(question_text(messages), "question")

    async def screen(self, model: str, req: ChatCompletionRequest, prompt_tokens: int) -> None:
        """ChatService.start's check of a request whose audio became transcripts, before the engine sees it."""
        verdict = await self.check_question(req.messages)
        if verdict.blocked:
            raise QuestionBlocked(verdict, model, prompt_tokens)

    def result(self) -> dict[str, Any] | None:
        if not self.config.show_result:
            return None
        if not self.blocked:
            return result_json(PASS, "answer")
        verdict, stage = self.blocked[min(self.blocked)]
        return result_json(verdict, stage)

    def _block(
        self, head: ChatCompletionChunk, index: int, verdict: Verdict, stage: Stage, usage: Usage
    ) -> list[ChatCompletionChunk]:
        """The interception chunk and the closing chunk of one blocked choice."""
        self.blocked[index] = (verdict, stage)
        top: dict[str, Any] = {"suggestion": "block", "reply": verdict.reply}
        if self.config.show_result:
            top["moderation_result"] = result_json(verdict, stage)
        common: dict[str, Any] = {"id": head.id, "created": head.created, "model": head.model}
        reply = ChunkChoice(index=index, delta=Delta(role="assistant", content=verdict.reply))
        close = ChunkChoice(index=index, delta=Delta(role="assistant", content=""), finish_reason=CONTENT_FILTER)
        return [
            InterceptionChunk(**common, choices=[reply], top_level=top, replaces=True),
            ChatCompletionChunk(**common, choices=[close], usage=usage),
        ]

    async def blocked_question(
        self, head: ChatCompletionChunk, n: int, prompt: Usage, verdict: Verdict
    ) -> AsyncIterator[ChatCompletionChunk]:
        """The whole stream of a request whose question was blocked: nothing reaches the engine."""
        for i in range(n):
            yield head.model_copy(update={"choices": [ChunkChoice(index=i, delta=Delta(role="assistant", content=""))]})
            for chunk in self._block(head, i, verdict, "question", prompt.model_copy(deep=True)):
                yield chunk
        yield head.model_copy(update={"choices": [], "usage": prompt, "moderation_result": self.result()})

    async def answers(
        self,
        chunks: AsyncIterable[ChatCompletionChunk],
        prompt_tokens: int,
        cached_tokens: int,
        n: int,
        abort: Callable[[], None],
    ) -> AsyncIterator[ChatCompletionChunk]:
        """Check each choice's growing content; end a choice at its first blocked chunk (that chunk is held). The
        last chunk carries the request's `moderation_result` (the fold puts it in a non-stream body)."""
        texts: dict[int, str] = {}
        tokens: dict[int, int] = {}
        async for chunk in chunks:
            if not chunk.choices:
                if chunk.usage is not None:
                    update: dict[str, Any] = {"moderation_result": self.result()}
                    if self.blocked:  # usage counts what each choice was allowed to say
                        done = sum(tokens.values())
                        usage = update["usage"] = chunk.usage.model_copy(deep=True)
                        usage.completion_tokens, usage.total_tokens = done, usage.prompt_tokens + done
                    chunk = chunk.model_copy(update=update)
                yield chunk
                continue
            (c,) = chunk.choices
            if c.index in self.blocked:
                continue
            tokens[c.index] = tokens.get(c.index, 0) + (len(chunk.timeline.token_ids) if chunk.timeline else 0)
            if c.delta.content:
                texts[c.index] = texts.get(c.index, "") + c.delta.content
                verdict = await self.check(texts[c.index], "answer")
                if verdict.blocked:
                    usage = Usage(
                        prompt_tokens=prompt_tokens,
                        completion_tokens=tokens[c.index],
                        total_tokens=prompt_tokens + tokens[c.index],
                        prompt_tokens_details=PromptTokensDetails(cached_tokens=cached_tokens),
                    )
                    for out in self._block(chunk, c.index, verdict, "answer", usage):
                        yield out
                    if len(self.blocked) == n:
                        abort()  # nothing left to say: free the engine slot now
                    continue
            yield chunk
