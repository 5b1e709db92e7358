"""The legacy completions request (OpenAI's `/v1/completions` as vLLM serves it) and its validation.

A completion request is checked here for what is its own (`prompt` in its four shapes, `echo`, `logprobs` as an
integer, `suffix` refused); every sampling field is the chat request's, validated by `parse_chat_request` with the
same rules and messages, one chat request per prompt (engine/serving/completions.py builds them once the prompts
are tokenized). docs/completions.md is the route's contract.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from engine.protocol.errors import RequestValidationError
from engine.protocol.messages import show

MAX_PROMPTS = 128  # prompts in one request (each one runs as a request of its own, one after the other)
MAX_LOGPROBS = 20
# Fields the chat request takes as they are: sampling, stops, stream options, and what other features add to the
# chat request (logit_bias, structured outputs), so a completion gets them with the same rules.
SHARED_FIELDS = (
    "model",
    "stream",
    "stream_options",
    "max_tokens",
    "n",
    "best_of",
    "seed",
    "stop",
    "stop_token_ids",
    "include_stop_str_in_output",
    "ignore_eos",
    "skip_special_tokens",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
    "user",
    "moderation_config",
    "speculative",
    "prompt_logprobs",
    "logit_bias",
    "response_format",
    "structured_outputs",
    "guided_json",
    "guided_regex",
    "guided_choice",
    "guided_grammar",
)
DEFAULT_MAX_TOKENS = 16  # OpenAI's default for this route


@dataclass
class CompletionRequest:
    """A validated completion request: its prompts (text, or token ids), its own fields, and the chat fields its
    prompts' chat requests are built from (`chat_fields`, not yet validated against the chat rules)."""

    prompts: list[str | list[int]]
    echo: bool = False
    logprobs: int | None = None
    stream: bool = False
    chat_fields: dict[str, Any] = field(default_factory=dict)

    @property
    def model(self) -> Any:
        return self.chat_fields.get("model")

    @property
    def n(self) -> int:
        n = self.chat_fields.get("n")
        return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else 1

    def chat_body(self) -> dict[str, Any]:
        """The chat request body of each prompt, bar its messages: `logprobs` k becomes `logprobs: true,
        top_logprobs: k`; with `echo` and `logprobs` the prompt's own logprobs are asked for too."""
        body = dict(self.chat_fields)
        body.setdefault("max_tokens", DEFAULT_MAX_TOKENS)
        if self.logprobs is not None:
            body["logprobs"], body["top_logprobs"] = True, self.logprobs
            if self.echo:
                body["prompt_logprobs"] = max(self.logprobs, body.get("prompt_logprobs") or 0)
        return body


def _prompts(value: Any) -> list[str | list[int]]:
    def bad(msg: str) -> RequestValidationError:
        return RequestValidationError(f"Parameter prompt {msg}")

    if isinstance(value, str):
        if not value:
            raise bad("must not be empty.")
        return [value]
    if not isinstance(value, list):
        raise bad(
            f"must be a string, an array of strings, an array of token ids or an array of token-id arrays, "
            f"got {show(value)}."
        )
    if not value:
        raise bad("must not be an empty array.")
    if all(type(v) is int for v in value):
        return [_ids(value, "prompt")]
    if len(value) > MAX_PROMPTS:
        raise bad(f"must hold at most {MAX_PROMPTS} prompts, got {len(value)}.")
    out: list[str | list[int]] = []
    for i, item in enumerate(value):
        if isinstance(item, str) and all(isinstance(v, str) for v in value):
            if not item:
                raise RequestValidationError(f"prompt[{i}] must not be empty.")
            out.append(item)
        elif isinstance(item, list) and all(isinstance(v, list) for v in value):
            if not item:
                raise RequestValidationError(f"prompt[{i}] must not be an empty array.")
            out.append(_ids(item, f"prompt[{i}]"))
        else:
            raise bad(
                "must be an array of strings, of token ids or of token-id arrays, not a mix "
                f"(prompt[{i}] is {show(item)})."
            )
    return out


def _ids(items: list[Any], path: str) -> list[int]:
    for j, v in enumerate(items):
        if type(v) is not int or v < 0:
            raise RequestValidationError(f"{path}[{j}] must be a token id (an integer >= 0), got {show(v)}.")
    return list(items)


def parse_completion_request(obj: object) -> CompletionRequest:
    """Validate a decoded JSON value. Raises RequestValidationError with a clear message."""
    if not isinstance(obj, dict):
        raise RequestValidationError("Request body must be a JSON object.")
    data = {k: v for k, v in obj.items() if v is not None}  # null = absent, as on the chat route
    if "model" not in data:
        raise RequestValidationError("Field 'model' is required.", missing=True)
    if "prompt" not in data:
        raise RequestValidationError("Field 'prompt' is required.", missing=True)
    if "suffix" in data:
        raise RequestValidationError("Parameter suffix is not supported: this server does not fill in the middle.")
    echo = data.get("echo", False)
    if not isinstance(echo, bool):
        raise RequestValidationError(f"Parameter echo must be a boolean, got {show(echo)}.")
    logprobs = data.get("logprobs")
    if logprobs is not None and (type(logprobs) is not int or not 0 <= logprobs <= MAX_LOGPROBS):
        raise RequestValidationError(
            f"Parameter logprobs must be an integer in [0, {MAX_LOGPROBS}], got {show(logprobs)}."
        )
    stream = data.get("stream", False)
    return CompletionRequest(
        prompts=_prompts(data["prompt"]),
        echo=echo,
        logprobs=logprobs,
        stream=stream is True,
        chat_fields={k: data[k] for k in SHARED_FIELDS if k in data},
    )
