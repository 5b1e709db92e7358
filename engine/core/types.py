"""Plain data the engine core exchanges with its callers. No torch, no pydantic, no HTTP."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

FINISH_STOP = "stop"
FINISH_LENGTH = "length"
FINISH_RESOURCES = "insufficient_system_resource"


@dataclass
class EngineLimits:
    max_num_seqs: int = 32
    kv_cache_tokens: int = 65536
    max_queue: int = 64
    max_model_len: int = 2048
    max_batched_tokens: int = 256  # prompt tokens prefilled per step, beside the decodes
    adaptive_threads: bool = True  # CPU: fewer threads when another process slows the steps (core/threads.py)
    step_log: int = 4096  # step records kept for the scheduler x-ray (core/step_log.py); 0 = none made at all
    speculative_ngram: int = 0  # n-gram drafts verified per step (core/speculative.py) by default; 0 = off


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 1.0  # 0 = greedy
    top_p: float = 1.0
    top_k: int = 0  # <= 0 = off
    min_p: float = 0.0  # 0 = off; else keep tokens with p >= min_p * the top token's p (after temperature)
    seed: int | None = None  # None = a fresh random seed per request
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    max_tokens: int = 16  # already capped by the server and the context window
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    include_stop_str_in_output: bool = False
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    n: int = 1
    best_of: int = 1  # candidates sampled; the n with the highest cumulative logprob are returned
    use_beam_search: bool = False
    logprobs: bool = False
    top_logprobs: int = 0
    prompt_logprobs: int | None = None  # vLLM's: each prompt token's logprob, rank and this many top others
    # With prompt_logprobs: keep the whole log-softmax row predicting each prompt token from this index on
    # (RequestStats.prompt_rows): the teacher-forced distributions the quality meter compares (serving/quality.py).
    prompt_rows_from: int | None = None
    sampler_logprobs: bool = False  # also record the top candidates after the samplers (TokenLogprob.processed)
    think_ids: tuple[int, int] | None = None  # (<think>, </think>) ids when the reasoning split is active
    thinking_budget: int | None = None  # reasoning tokens before `think_stop_ids` is forced
    think_stop_ids: tuple[int, ...] = ()  # forced when the budget is spent; ends with the </think> id
    return_progress: bool = False  # hand the caller a PromptProgress after each chunk of the prompt's prefill
    speculative: int | None = None  # n-gram drafts a step (core/speculative.py): 0 = off, None = the engine's default
    # (token id, bias) pairs added to the logits before every sampler and constraint (OpenAI's logit_bias)
    logit_bias: tuple[tuple[int, float], ...] = ()

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    @property
    def num_candidates(self) -> int:
        return max(self.n, self.best_of)

    @property
    def streams_live(self) -> bool:
        """Whether choices can be released token by token (otherwise ranked and released at the end)."""
        return not self.use_beam_search and self.best_of <= self.n


@dataclass
class TokenLogprob:
    token_id: int
    logprob: float
    top: list[tuple[int, float]]  # (token id, logprob), best first
    # With `sampler_logprobs`: the top candidates after the samplers (penalties, constraint mask, temperature,
    # top-k, top-p), best first, -inf ones dropped; and the chosen token's logprob there (None when it was forced).
    processed: list[tuple[int, float]] | None = None
    processed_logprob: float | None = None


@dataclass
class ChoiceDelta:
    """What one choice produced since its previous delta. Stats lists have one entry per new token."""

    index: int
    text: str = ""  # answer text (everything, when the reasoning split is off)
    reasoning_text: str = ""  # reasoning text, when the split is active
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[TokenLogprob] = field(default_factory=list)
    batch_sizes: list[int] = field(default_factory=list)
    queue_waits_us: list[int] = field(default_factory=list)
    token_times: list[float] = field(default_factory=list)  # time.perf_counter() when each token was ready
    steps: list[Any] = field(default_factory=list)  # the step_log.StepRecord of each token's step (none: log off)
    finish_reason: str | None = None
    stop_reason: str | int | None = None
    cumulative_logprob: float = 0.0
    reasoning_tokens: int | None = None  # on the finishing delta, when the split is active (spec §7.5)
    # Speculative decoding (core/speculative.py): whether it is on for the sequence, drafts proposed since the last
    # delta, and which of this delta's tokens (indices into token_ids) were accepted drafts.
    speculative: bool = False
    drafted: int = 0
    accepted: list[int] = field(default_factory=list)


@dataclass
class PromptTokenLogprob:
    """A prompt token's logprob given the tokens before it (vLLM's `prompt_logprobs`): its rank among the
    vocabulary (1 = the most likely) and the `top` others, (token id, logprob) best first."""

    token_id: int
    logprob: float
    rank: int
    top: list[tuple[int, float]]


@dataclass(frozen=True)
class PromptProgress:
    """How far a request's prompt is prefilled, handed out after each of its prompt chunks (llama.cpp's
    `return_progress`). `processed` counts the prompt tokens whose KV is ready, the `cached` ones included."""

    total: int
    cached: int
    processed: int
    time_ms: float  # since the engine accepted the request


@dataclass
class RequestStats:
    prompt_tokens: int
    cached_tokens: int = 0
    arrival: float = 0.0  # time.perf_counter() when the engine accepted the request
    short_id: str = ""  # the request's anonymous id in step records (step_log.short_id), set at submit
    # With `prompt_logprobs`: one entry per prompt token, None for the first (nothing precedes it); filled by the
    # engine thread while the prompt is prefilled, complete before the first token is handed out.
    prompt_logprobs: list[PromptTokenLogprob | None] | None = None
    # With `prompt_rows_from`: float32 [tokens, vocab] log-softmax rows on the CPU, a block per prompt chunk.
    prompt_rows: list[Any] = field(default_factory=list)


@dataclass
class EngineRequest:
    request_id: str
    prompt_ids: list[int]
    params: SamplingParams
    cache_salt: bytes = b""  # folded into prefix-cache keys: e.g. a digest of the request's media
    constraint: Any = None  # a constraints.TokenConstraint for structured output / forced tool calls
    # Media tensors of a multimodal prompt (pixel_values, image_grid_thw, input_features, ...), keyed by the model's
    # forward arguments; the prompt ids already hold the expanded placeholders. None for text.
    mm: dict[str, Any] | None = None
    adapter: int = 0  # LoRA adapter index (engine/core/lora.py LoraSet.index): 0 = the base model


class EngineError(Exception):
    """A request failed inside the engine. `resources` marks exhaustion (OOM, no KV room); `stopped`, an engine
    that stopped (its model unloaded, the server shutting down) before the request could run."""

    def __init__(
        self, message: str, *, resources: bool = False, queue_full: bool = False, stopped: bool = False
    ) -> None:
        super().__init__(message)
        self.resources = resources
        self.queue_full = queue_full
        self.stopped = stopped


# What a caller submits with a request: the engine calls it on its own thread with a list of ChoiceDelta, a
# PromptProgress (only when the request asked for them), an EngineError, or None when the request is done.
Sink = Callable[[list[ChoiceDelta] | PromptProgress | EngineError | None], None]
