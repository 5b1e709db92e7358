"""The request's smaller parts (spec §2.1-§2.3): the route families, ranges checked and documented from one label,
stream options, response format, moderation config, and the media-count and size limits of §2.3.

engine/protocol/request.py builds `ChatCompletionRequest` from these and re-exports the public ones.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, GetCoreSchemaHandler, GetJsonSchemaHandler, StringConstraints, model_validator
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, core_schema

from engine.media import sources as media_limits
from engine.protocol.errors import RequestValidationError
from engine.protocol.messages import InputAudioPart, Message, StrictModel, TextPart, fail, show

Route = Literal["v1", "pangu_v1", "pangu_v2"]
INT32_MAX = 2_147_483_647
MAX_CHAT_TEMPLATE_BYTES = 1 << 20
RESERVED_TEMPLATE_KWARGS = ("messages", "tools", "documents", "add_generation_prompt", "bos_token", "eos_token",
                            "chat_template")  # fmt: skip


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
    parts = [(i, j, part) for i, m in enumerate(messages) if isinstance(m.content, list)
             for j, part in enumerate(m.content) if not isinstance(part, TextPart)]  # fmt: skip
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
