"""Request -> engine SamplingParams, applying the server's caps (spec §2.2, §2.4.2)."""

from __future__ import annotations

from typing import Any

from engine.config import ServingSettings
from engine.core.speculative import DEFAULT_K
from engine.core.types import SamplingParams
from engine.protocol.errors import RequestValidationError
from engine.protocol.request import ChatCompletionRequest

BEAM_MAX_TOKENS = 128


def logit_bias(req: Any, vocab_size: int) -> tuple[tuple[int, float], ...]:
    """A request's logit_bias as the engine takes it, its ids checked against the model's vocabulary (the width of
    its logits; 0 = unknown, unchecked). Reads the field by name: chat and completions requests share it."""
    bias: dict[int, float] = getattr(req, "logit_bias", None) or {}
    if vocab_size:
        for token in bias:
            if token >= vocab_size:
                raise RequestValidationError(
                    f"Parameter logit_bias has token id {token} outside the model's vocabulary [0, {vocab_size - 1}]."
                )
    return tuple(sorted((t, b) for t, b in bias.items() if b))  # a 0 bias changes nothing: dropped


def sampling_params(
    req: ChatCompletionRequest,
    settings: ServingSettings,
    prompt_tokens: int,
    context_length: int,
    gen_config: dict[str, Any],
    vocab_size: int = 0,
) -> SamplingParams:
    defaults = gen_config if settings.use_model_generation_config else {}

    def pick(value: Any, key: str, fallback: Any) -> Any:
        if value is not None:
            return value
        return defaults.get(key, fallback) if key else fallback

    temperature = pick(req.temperature, "temperature", 1.0)
    if defaults and req.temperature is None and defaults.get("do_sample") is False:
        temperature = 0.0
    n = req.n or 1
    best_of = req.best_of or n
    width = max(n, best_of) if req.use_beam_search else best_of
    for name, value in (("n", n), ("best_of", best_of)):
        if value > settings.max_n:
            raise RequestValidationError(
                f"Parameter {name} must be at most the server limit max_n={settings.max_n}, got {value}."
            )
    if req.use_beam_search and width > settings.max_n:
        raise RequestValidationError(f"Beam width {width} exceeds the server limit max_n={settings.max_n}.")
    requested = req.effective_max_tokens or settings.max_new_tokens
    max_tokens = min(requested, settings.max_new_tokens, context_length - prompt_tokens)
    if req.use_beam_search and min(requested, settings.max_new_tokens) > BEAM_MAX_TOKENS:
        raise RequestValidationError(f"Parameter max_tokens must be at most {BEAM_MAX_TOKENS} with use_beam_search.")
    top_k = pick(req.top_k, "top_k", 0)
    return SamplingParams(
        temperature=float(temperature),
        top_p=float(pick(req.top_p, "top_p", 1.0)),
        top_k=top_k if top_k > 0 else 0,
        min_p=float(pick(req.min_p, "min_p", 0.0)),
        seed=req.seed,
        presence_penalty=float(req.presence_penalty or 0.0),
        frequency_penalty=float(req.frequency_penalty or 0.0),
        repetition_penalty=float(pick(req.repetition_penalty, "repetition_penalty", 1.0)),
        max_tokens=max(1, max_tokens),
        stop=tuple(req.stop_list),
        stop_token_ids=tuple(req.stop_token_id_list),
        include_stop_str_in_output=req.include_stop_str_in_output,
        ignore_eos=req.ignore_eos,
        skip_special_tokens=req.skip_special_tokens,
        n=n,
        best_of=width,
        use_beam_search=req.use_beam_search,
        logprobs=req.wants_logprobs,
        top_logprobs=req.top_logprobs_count,
        sampler_logprobs=req.sampler_logprobs,
        return_progress=req.return_progress,
        prompt_logprobs=req.prompt_logprobs,
        speculative=None if req.speculative is None else (settings.speculative_ngram or DEFAULT_K) * req.speculative,
        logit_bias=logit_bias(req, vocab_size),
    )
