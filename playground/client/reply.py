"""The page's reply model: chunks -> one reply (per choice its answer, reasoning, tool calls, logprobs and per-token
timings) and its statistics. Each choice is the service's own fold of its deltas (engine/serving/fold.py, `ChoiceFold`,
which the API's non-stream response is built from) extended with the timeline. The page renders it (chat, stats,
timeline, tokens); the notebooks' ChatResult reads it. Neither folds a chunk itself, so they cannot disagree.

Everything comes from the `ChatCompletionChunk`s as the backend yields them; nothing is re-parsed or estimated, and
a number the backend did not give is None (the page says "not provided"). The embedded engine puts its per-token
timeline on every chunk (the excluded `timeline` attribute, for that chunk's single choice). A remote server's
chunks carry arrival times only (stamped by playground/client/remote.py), plus, when the server sends MindIE's perf
stats, each choice's batch sizes and queue waits in its closing usage.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from engine.protocol.response import ChatCompletionChunk, ChunkChoice, PromptProgressInfo, TokenTimeline, Usage
from engine.serving.fold import ChoiceFold
from engine.serving.step_times import decode_times

RAW_CHUNKS_KEPT = 400  # the raw view shows the tail of a long stream


@dataclass
class ChoiceView(ChoiceFold):
    """The service's fold of one choice (engine/serving/fold.py: its text, reasoning, tool calls, logprobs and finish
    reason) and what the page shows besides: the engine's per-token timeline and the choice's usage."""

    token_ids: list[int] = field(default_factory=list)
    times_ms: list[float] = field(default_factory=list)  # when each token was ready, since the request was accepted
    batch_sizes: list[int] = field(default_factory=list)  # batch size of the step that made each token
    queue_waits_us: list[int] = field(default_factory=list)  # wait before the step that made each token
    prepare_ms: float | None = None  # accepted -> handed to the engine (media, template, tokens)
    usage: Usage | None = None  # from the choice's closing chunk
    answer_at: int | None = None  # tokens before the first answer text or tool call (the reasoning boundary)
    engine_timeline: bool = False  # the engine's per-token facts came: ids, batch sizes, waits, preparation
    # The scheduler x-ray (playground/page/tabs/xray.py): per token its step as StepRecord.view gives it (the peers
    # without this request, whose short id is `xray_id`); empty where the backend gives no step records.
    steps: list[dict[str, Any]] = field(default_factory=list)
    xray_id: str | None = None
    accepted: list[int] = field(default_factory=list)  # indices of the tokens that were accepted speculative drafts
    _before_answer: int = 0

    def add(
        self, c: ChunkChoice, timeline: TokenTimeline | None, usage: Usage | None = None, replaces: bool = False
    ) -> None:
        """One chunk of this choice; `replaces`: a moderation interception, whose text replaces what was said."""
        d = c.delta
        if self.answer_at is None and (d.content or d.tool_calls):
            self.answer_at = self._before_answer
        if timeline is not None:
            self.engine_timeline = self.engine_timeline or bool(timeline.token_ids)
            self.accepted += [len(self.token_ids) + i for i in timeline.accepted]
            self.token_ids += timeline.token_ids
            self.times_ms += timeline.token_times_ms
            self.batch_sizes += timeline.batch_sizes
            self.queue_waits_us += timeline.queue_waits_us
            if timeline.steps:
                self.xray_id = timeline.short_id or self.xray_id
                self.steps += [s.view(self.xray_id) for s in timeline.steps]
            if timeline.prepare_ms is not None:
                self.prepare_ms = timeline.prepare_ms
            if self.answer_at is None:
                self._before_answer += len(timeline.token_ids)
        self.add_delta(c, replaces)
        if c.finish_reason is not None and usage is not None:
            self.close(usage)

    def close(self, usage: Usage) -> None:
        """The choice's usage; without the engine's timeline (a remote stream), its perf-stat lists if sent."""
        self.usage = usage
        if not self.engine_timeline:
            if "batch_size" in usage.model_fields_set:
                self.batch_sizes = list(usage.batch_size)
            if "queue_wait_time" in usage.model_fields_set:
                self.queue_waits_us = list(usage.queue_wait_time)

    def _given(self, name: str) -> bool:
        return self.engine_timeline or (self.usage is not None and name in self.usage.model_fields_set)

    @property
    def batch_sizes_given(self) -> bool:
        return self._given("batch_size")

    @property
    def queue_waits_given(self) -> bool:
        return self._given("queue_wait_time")

    @property
    def gaps_ms(self) -> list[float]:
        """The time before each token: the first one's since acceptance, then each one's since the one before."""
        t = self.times_ms
        return [t[0], *(b - a for a, b in zip(t, t[1:]))] if t else []

    @property
    def prefill_time(self) -> int | None:
        """MindIE's `prefill_time`: ms to the first token (whole ms, as the engine's closing chunk has it)."""
        return round(self.times_ms[0]) if self.times_ms else None

    @property
    def decode_time_arr(self) -> list[int]:
        """MindIE's `decode_time_arr`: whole ms per later token, rounded before the difference, a speculative
        step's time spread over its tokens, as the engine's (engine/serving/step_times.py)."""
        return decode_times(self.times_ms)[1]

    @property
    def reasoning_tokens(self) -> int:
        """The engine's count once the choice closed; while streaming, the tokens before the answer began."""
        details = self.usage.completion_tokens_details if self.usage is not None else None
        if details is not None:
            return details.reasoning_tokens
        if not self.reasoning:
            return 0
        return self.answer_at if self.answer_at is not None else len(self.token_ids)

    @property
    def thinking(self) -> bool:
        return bool(self.reasoning) and self.answer_at is None and self.finish_reason is None

    @property
    def cumulative_logprob(self) -> float | None:
        return sum(e.logprob for e in self.logprobs) if self.logprobs else None

    @property
    def reasoning_exhausted(self) -> bool:
        """Reasoning used up max_tokens and left no answer: the case the UI warns about."""
        return (
            self.finish_reason == "length" and bool(self.reasoning) and not self.content.strip() and not self.tool_calls
        )


@dataclass
class ReplyStats:
    """One choice's numbers; None where the backend did not give them (or, while streaming, not yet)."""

    completion_tokens: int
    prompt_tokens: int | None = None  # known once the usage chunk arrived
    media_tokens: int | None = None  # of the prompt, what the model's own image / video / audio parts took
    cached_tokens: int | None = None
    reasoning_tokens: int = 0
    ttft_ms: float | None = None  # request accepted -> first token ready
    prepare_ms: float | None = None  # accepted -> handed to the engine: media loading or transcription, template
    queue_ms: float | None = None  # handed to the engine -> the first step started
    prefill_ms: float | None = None  # the first step itself
    decode_tps: float | None = None  # tokens after the first, over their time
    e2e_ms: float | None = None  # accepted -> last token ready
    max_batch: int | None = None
    mean_queue_wait_us: float | None = None
    finish_reason: str | None = None
    streaming: bool = False
    backend: str = "embedded"
    not_provided: list[str] = field(default_factory=list)  # the statistics this backend's stream does not carry
    speculative: dict[str, int] | None = None  # usage.speculative: drafted and accepted tokens, when it ran
    quality: str | None = None  # the quality meter's summary, once measured (engine/serving/quality.py)


@dataclass
class ReplyView:
    choices: dict[int, ChoiceView] = field(default_factory=dict)
    usage: Usage | None = None  # the trailing usage chunk: the whole request
    error: str | None = None
    stopped: bool = False  # the user pressed Stop
    done: bool = False
    raw: deque[str] = field(default_factory=lambda: deque(maxlen=RAW_CHUNKS_KEPT))
    transcription: list[dict[str, Any]] | None = None  # the first chunk's: audio parts the server transcribed
    media: list[dict[str, Any]] | None = None  # the first chunk's: media parts the model took (type, tokens, ...)
    backend: str = "embedded"  # the backend's kind: "embedded", or "remote" (its times are arrival times here)
    id: str = ""
    progress: list[PromptProgressInfo] = field(default_factory=list)  # the prompt's prefill, chunk by chunk
    branched: dict[str, Any] | None = None  # a branch from a token (playground/client/branch.py): {at, was, now}
    prompt_logprobs: list[Any] | None = None  # vLLM's, when asked for (text mode): the first chunk's
    quality: dict[str, Any] | None = None  # the quality meter's report (Quality.as_json), once asked for

    def add(self, chunk: ChatCompletionChunk) -> None:
        self.id = self.id or chunk.id
        self.raw.append(chunk.model_dump_json(exclude_none=True))
        self.transcription = self.transcription or chunk.transcription
        self.media = self.media or chunk.media
        if self.prompt_logprobs is None and chunk.prompt_logprobs is not None:
            self.prompt_logprobs = chunk.prompt_logprobs
        if chunk.prompt_progress is not None:
            self.progress.append(chunk.prompt_progress)
            return
        if not chunk.choices:
            if chunk.usage is not None:
                self.usage = chunk.usage
                only = list(self.choices.values())
                if len(only) == 1 and only[0].usage is None:  # n = 1: the request's usage is the choice's
                    only[0].close(chunk.usage)
            return
        for c in chunk.choices:
            view = self.choices.setdefault(c.index, ChoiceView(c.index))
            view.add(c, chunk.timeline if len(chunk.choices) == 1 else None, chunk.usage, chunk.replaces)

    @property
    def first(self) -> ChoiceView:
        return self.choices.get(0) or ChoiceView(0)

    def usage_of(self, index: int = 0) -> Usage | None:
        """The choice's own usage, else (aborted, or n = 1) the request's."""
        view = self.choices.get(index)
        own = view.usage if view is not None else None
        return own or self.usage

    def stats(self, index: int = 0) -> ReplyStats:
        c = self.choices.get(index) or self.first
        t, usage = c.times_ms, self.usage_of(index)
        s = ReplyStats(
            completion_tokens=len(t), reasoning_tokens=c.reasoning_tokens, streaming=not self.done, backend=self.backend
        )
        if usage is not None:
            s.prompt_tokens, s.cached_tokens = usage.prompt_tokens, usage.prompt_tokens_details.cached_tokens
            s.speculative = usage.speculative
        if c.batch_sizes_given:
            s.max_batch = max(c.batch_sizes, default=0)
        if c.queue_waits_given and c.queue_waits_us:
            s.mean_queue_wait_us = sum(c.queue_waits_us) / len(c.queue_waits_us)
        if t:
            s.ttft_ms, s.e2e_ms = t[0], t[-1]
            if c.queue_waits_given and c.queue_waits_us:
                s.queue_ms = c.queue_waits_us[0] / 1000
            if c.engine_timeline and s.queue_ms is not None:
                s.prepare_ms = c.prepare_ms
                s.prefill_ms = max(0.0, t[0] - (s.prepare_ms or 0.0) - s.queue_ms)
            if len(t) > 1 and t[-1] > t[0]:
                s.decode_tps = (len(t) - 1) / ((t[-1] - t[0]) / 1000)
        s.finish_reason = c.finish_reason or ("stopped" if self.stopped else "error" if self.error else None)
        s.quality = self.quality["summary"] if self.quality and index == 0 else None
        if self.media:
            s.media_tokens = sum(int(m.get("tokens") or 0) for m in self.media)
        if t and not c.engine_timeline:  # arrival times only: say what is missing rather than guess it
            given = {"queue wait": c.queue_waits_given, "batch size (max)": c.batch_sizes_given}
            s.not_provided = [name for name in ENGINE_ONLY if not given.get(name, False)]
            if usage is not None and "prompt_tokens_details" not in usage.model_fields_set:  # vLLM sends null
                s.cached_tokens = None
                s.not_provided.append("cached tokens")
        return s


# The statistics only an engine's own timeline gives (a remote stream has none; its perf stats give two of them).
ENGINE_ONLY = ("engine timeline", "preparation", "queue wait", "prefill", "batch size (max)", "token ids")
