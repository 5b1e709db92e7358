"""The request's smaller parts (spec §2.1-§2.3): the route families, ranges checked and documented from one label,
stream options, response format, moderation config, and the media-count and size limits of §2.3.

engine/protocol/request.py builds `ChatCompletionRequest` from these and re-exports the public ones.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import (
    BeforeValidator,
    Field,
    GetCoreSchemaHandler,
    GetJsonSchemaHandler,
    StringConstraints,
    model_validator,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, core_schema

from engine.media import sources as media_limits
from engine.protocol.errors import RequestValidationError
from engine.protocol.messages import InputAudioPart, Message, StrictModel, TextPart, fail, show

Route = Literal["v1", "pangu_v1", "pangu_v2"]
INT32_MAX = 2_147_483_647
MAX_CHAT_TEMPLATE_BYTES = 1 << 20
RESERVED_TEMPLATE_KWARGS = (
    "messages",
    "tools",
    "documents",
    "add_generation_prompt",
    "bos_token",
    "eos_token",
    "chat_template",
)


class _Range:
    """Range check from its label: "[0.0, 2.0]", "(1e-6, 1.0]"; a bracket is inclusive, a parenthesis exclusive.
    Also writes the bounds into the JSON schema, so the OpenAPI document states the same ranges."""

    def __init__(self, label: str) -> None:
        self.label = label
        lo_text, hi_text = (s.strip() for s in label[1:-1].split(","))
        self.lo, self.hi = (float(t) if any(c in t for c in ".e") else int(t) for t in (lo_text, hi_text))

    def check(self, value: float) -> float:
        above = value > self.lo if self.label[0] == "(" else value >= self.lo
        below = value < self.hi if self.label[-1] == ")" else value <= self.hi
        if not (above and below):  # written this way so NaN fails too
            raise fail(f"must be in {self.label}, got {show(value)}.")
        return value

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        return core_schema.no_info_after_validator_function(self.check, handler(source))

    def __get_pydantic_json_schema__(self, schema: CoreSchema, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        out = handler(schema)
        out["exclusiveMinimum" if self.label[0] == "(" else "minimum"] = self.lo
        out["exclusiveMaximum" if self.label[-1] == ")" else "maximum"] = self.hi
        return out


_range = _Range


class StreamOptions(StrictModel):
    include_usage: bool = False
    continuous_usage_stats: bool = False


class JSONSchemaFormat(StrictModel):
    name: Annotated[str, StringConstraints(min_length=1, max_length=64)]
    schema_: dict[str, Any] = Field(alias="schema")
    description: str | None = None
    strict: bool | None = None


class ResponseFormat(StrictModel):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JSONSchemaFormat | None = None

    @model_validator(mode="after")
    def _schema_given(self) -> ResponseFormat:
        if self.type == "json_schema" and self.json_schema is None:
            raise fail("", sub="json_schema", missing=True)
        return self


class ModerationConfig(StrictModel):
    black_glossary_names: list[str] | None = None
    white_glossary_names: list[str] | None = None
    question_moderation: bool = True
    answer_moderation: bool = True
    show_result: bool = False


# The limits of spec §2.3, owned by engine/media (which enforces them again on the decoded bytes).
MAX_MEDIA_ITEMS = media_limits.MAX_ITEMS
MAX_MEDIA_BYTES = {part: media_limits.MAX_BYTES[kind] for part, kind in media_limits.PART_KINDS.items()}
MAX_MEDIA_TOTAL = media_limits.MAX_TOTAL_BYTES


def _inline_bytes(part: Any) -> int:
    """Decoded size of inline base64 media (data URL, raw base64 image, input_audio) from its length alone;
    0 for a URL or a path, whose size is only known once fetched."""
    if isinstance(part, InputAudioPart):
        data = part.input_audio.data
    else:
        source = getattr(part, part.type)
        url = source if isinstance(source, str) else source.url
        if url.startswith("data:"):
            data = url.partition(",")[2]
        elif part.type == "image_url" and not url.startswith(("http://", "https://", "file://", "/", ".")):
            data = url
        else:
            return 0
    return len(data) * 3 // 4 - len(data) + len(data.rstrip("="))


def check_media_limits(messages: list[Message]) -> None:
    """§2.3: at most 20 media items per request, each and all of them within their decoded-size limits."""
    parts = [
        (i, j, part)
        for i, m in enumerate(messages)
        if isinstance(m.content, list)
        for j, part in enumerate(m.content)
        if not isinstance(part, TextPart)
    ]
    if len(parts) > MAX_MEDIA_ITEMS:
        raise RequestValidationError(f"A request may carry at most {MAX_MEDIA_ITEMS} media items, got {len(parts)}.")
    total = 0
    for i, j, part in parts:
        size = _inline_bytes(part)
        if size > MAX_MEDIA_BYTES[part.type]:
            limit = MAX_MEDIA_BYTES[part.type] >> 20
            raise RequestValidationError(f"messages[{i}].content[{j}] must be at most {limit} MiB decoded, got {size}.")
        total += size
    if total > MAX_MEDIA_TOTAL:
        raise RequestValidationError(f"All media of a request must be at most 1000 MiB decoded, got {total}.")


# ---- extensions: logit_bias (OpenAI's) and structured outputs (vLLM's) ------------------------------------------
LOGIT_BIAS_RANGE = 100.0
MAX_PATTERN_CHARS = 1 << 16  # a regex, a grammar, a JSON schema given as text


def check_logit_bias(value: Any) -> dict[int, float]:
    """OpenAI's logit_bias: an object from token ids (JSON keys, so strings of integers) to a bias in [-100, 100].
    The ids are checked against the model's vocabulary later, by the server (params.check_logit_bias)."""
    if not isinstance(value, dict):
        raise fail(f"must be an object mapping token ids to biases, got {show(value)}.")
    out: dict[int, float] = {}
    for key, bias in value.items():
        # JSON keys are strings; a Python caller (the notebooks' backend) may pass int keys: the same ids.
        text = key.strip() if isinstance(key, str) else str(key) if type(key) is int else ""
        if not (text.isascii() and text.isdigit()) or len(text) > 12:
            raise fail(f"keys must be token ids (non-negative integers), got {show(key)}.")
        if isinstance(bias, bool) or not isinstance(bias, int | float):
            raise fail(f"must be a number, got {show(bias)}.", sub=text)
        if not -LOGIT_BIAS_RANGE <= bias <= LOGIT_BIAS_RANGE:  # NaN fails too
            raise fail(f"must be in [-100, 100], got {show(bias)}.", sub=text)
        out[int(text)] = float(bias)
    return out


def _pattern(value: Any, what: str) -> Any:
    if isinstance(value, str):
        if not value.strip():
            raise fail(f"must be a non-empty {what}.")
        if len(value) > MAX_PATTERN_CHARS:
            raise fail(f"must be at most {MAX_PATTERN_CHARS} characters long, got {len(value)}.")
    return value


def check_choice(value: Any) -> Any:
    if isinstance(value, list):
        if not value:
            raise fail("must be a non-empty array of strings.")
        if len(value) > 1024:
            raise fail(f"must have at most 1024 items, got {len(value)}.")
        for i, item in enumerate(value):
            if not isinstance(item, str):
                raise fail(f"must be a string, got {show(item)}.", sub=f"[{i}]")
        if sum(map(len, value)) > MAX_PATTERN_CHARS:
            raise fail(f"must have at most {MAX_PATTERN_CHARS} characters in total.")
    return value


def check_json_schema(value: Any) -> Any:
    """A JSON schema as an object, or as JSON text that decodes to one (vLLM takes both)."""
    if isinstance(value, str):
        _pattern(value, "JSON schema")
        try:
            value = json.loads(value)
        except ValueError as exc:
            raise fail(f"must be a JSON schema object or its JSON text: {exc}.") from None
    if not isinstance(value, dict):
        raise fail(f"must be a JSON schema object, got {show(value)}.")
    return value


def _text_pattern(value: Any) -> Any:
    return _pattern(value, "string")


# The structured-output fields' types, each checked the same way wherever it appears (structured_outputs.* and the
# older guided_* fields of the request).
JsonSchemaField = Annotated[dict[str, Any], BeforeValidator(check_json_schema)]
PatternField = Annotated[str, BeforeValidator(_text_pattern)]
ChoiceField = Annotated[list[str], BeforeValidator(check_choice)]


class StructuredOutputs(StrictModel):
    """vLLM's `structured_outputs`: exactly one of json, regex, choice, grammar (Lark, or GBNF converted by
    llguidance), json_object. vLLM's tuning fields (disable_fallback, whitespace_pattern, ...) are ignored."""

    json_: JsonSchemaField | None = Field(default=None, alias="json")
    regex: PatternField | None = None
    choice: ChoiceField | None = None
    grammar: PatternField | None = None
    json_object: bool | None = None

    @model_validator(mode="after")
    def _one_given(self) -> StructuredOutputs:
        if not self.kinds():
            raise fail("must give one of json, regex, choice, grammar or json_object.")
        return self

    def kinds(self) -> list[tuple[str, str, Any]]:
        """(field path, kind, value) of each kind given: json, regex, choice, grammar or json_object."""
        given = [
            ("json", self.json_),
            ("regex", self.regex),
            ("choice", self.choice),
            ("grammar", self.grammar),
            ("json_object", {"type": "object"} if self.json_object else None),
        ]
        return [(f"structured_outputs.{k}", "json" if k == "json_object" else k, v) for k, v in given if v is not None]


def structured_kinds(req: Any) -> list[tuple[str, str, Any]]:
    """Every structured-output kind a request asks for, as (field path, kind, value); kind is json, regex, choice
    or grammar, plus json_object / json_schema for response_format. Reads the fields by name, so any request model
    with them (chat, completions) shares the rule."""
    out: list[tuple[str, str, Any]] = []
    so = getattr(req, "structured_outputs", None)
    if so is not None:
        out += so.kinds()
    for name, kind in (
        ("guided_json", "json"),
        ("guided_regex", "regex"),
        ("guided_choice", "choice"),
        ("guided_grammar", "grammar"),
    ):
        value = getattr(req, name, None)
        if value is not None:
            out.append((name, kind, value))
    rf = getattr(req, "response_format", None)
    if rf is not None and rf.type != "text":
        out.append(("response_format", rf.type, rf.json_schema.schema_ if rf.json_schema is not None else None))
    return out


def check_structured(req: Any) -> None:
    """One kind of structured output per request, and none under beam search."""
    kinds = structured_kinds(req)
    if len(kinds) > 1:
        names = " and ".join(path for path, _, _ in kinds[:2])
        raise RequestValidationError(f"Parameters {names} cannot be combined: give one kind of structured output.")
    if kinds and getattr(req, "use_beam_search", False):
        path, kind, _ = kinds[0]
        what = f"response_format.type {kind!r}" if path == "response_format" else path
        raise RequestValidationError(f"Parameter {what} cannot be combined with use_beam_search.")
