"""Chat message and content-part models (spec §2.2 `messages[]` rows, §2.4.1, cases 21-27).

Structural validation only: media sources are checked for shape and length here and decoded elsewhere.
Validators raise `fail(...)`; `to_request_error` turns the first pydantic error into a `RequestValidationError`
whose message names the field path (`messages[0].content[1].image_url`).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Discriminator,
    StringConstraints,
    Tag,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from engine.protocol.errors import RequestValidationError

PART_TYPES = ("text", "image_url", "video_url", "audio_url", "input_audio")
MEDIA_MODALITY = {"image_url": "image", "video_url": "video", "audio_url": "audio", "input_audio": "audio"}
MAX_URL_CHARS = 4096
# Spec: ^[A-Za-z0-9_\-\u4e00-\u9fa5]{1,64}$ (used with fullmatch, so a trailing newline cannot slip through `$`).
FUNCTION_NAME_RE = re.compile("[A-Za-z0-9_\\-\u4e00-\u9fa5]{1,64}")


def show(value: object) -> str:
    """A value as it may be echoed in an error: short scalars only (§6.5), strings truncated to 64 characters
    (with control characters escaped), arrays and objects only named."""
    if isinstance(value, bool) or value is None:
        return {True: "true", False: "false", None: "null"}[value]
    if isinstance(value, str):
        text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in value[:64])  # escape control characters
        return f"'{text}'" + ("..." if len(value) > 64 else "")
    if isinstance(value, int) and value.bit_length() > 256:
        return "a very large integer"
    if isinstance(value, (int, float)):
        text = repr(value)
        return text if len(text) <= 64 else text[:64] + "..."
    names: dict[type, str] = {list: "an array", dict: "an object"}
    return names.get(type(value), "a value of another type")


def fail(msg: str, *, sub: str | None = None, missing: bool = False) -> PydanticCustomError:
    """A validation failure. `msg` completes "<field path> ..." (e.g. "must be a non-empty string.");
    `sub` extends the path pydantic reports (".content", "[2].type"); `missing` marks a required field."""
    return PydanticCustomError("request", "{msg}", {"msg": msg, "sub": sub, "missing": missing})


_TYPE_PHRASES = {
    "string_type": "must be a string",
    "int_type": "must be an integer",
    "float_type": "must be a number",
    "bool_type": "must be a boolean",
    "list_type": "must be an array",
    "dict_type": "must be an object",
    "model_type": "must be an object",
    "model_attributes_type": "must be an object",
}


def _path(loc: tuple[str | int, ...], sub: str | None = None) -> str:
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif not part.startswith("#"):  # "#..." are union-branch tags, not fields
            path += f".{part}" if path else part
    if sub:
        path += sub if sub.startswith("[") or not path else f".{sub}"
    return path


def to_request_error(exc: ValidationError) -> RequestValidationError:
    """First pydantic error → one readable sentence naming the field path; never pydantic's URL or a repr."""
    err = exc.errors(include_url=False)[0]
    kind, ctx, value = err["type"], err.get("ctx") or {}, err.get("input")
    path = _path(err["loc"], ctx.get("sub") if kind == "request" else None)
    if kind == "missing" or (kind == "request" and ctx.get("missing")):
        return RequestValidationError(f"Field '{path}' is required.", missing=True)
    subject = f"Parameter {path}" if path.isidentifier() else path
    if kind == "request":
        return RequestValidationError(f"{subject} {ctx.get('msg', err['msg'])}".strip())
    if kind in _TYPE_PHRASES:
        phrase = f"{_TYPE_PHRASES[kind]}, got {show(value)}"
    elif kind == "literal_error":
        expected = str(ctx.get("expected", "")).replace("'", "").replace(" or ", ", ")
        phrase = f"must be one of {expected}, got {show(value)}"
    elif kind == "string_too_short":
        phrase = f"must be at least {ctx.get('min_length')} characters long"
        phrase = "must be a non-empty string" if ctx.get("min_length") == 1 else phrase
    elif kind == "string_too_long":
        phrase = f"must be at most {ctx.get('max_length')} characters long, got {len(value)}"
    elif kind == "too_short":
        phrase = (
            "must not be empty" if ctx.get("min_length") == 1 else f"must have at least {ctx.get('min_length')} items"
        )
    else:
        phrase = f"is invalid: {err['msg']}"
    return RequestValidationError(f"{subject} {phrase}.")


class StrictModel(BaseModel):
    """Strict JSON types (§2.1.3), unknown fields ignored, `null` treated as absent (§2.1.2)."""

    model_config = ConfigDict(strict=True, extra="ignore")

    @model_validator(mode="before")
    @classmethod
    def _nulls_are_absent(cls, data: Any) -> Any:
        if isinstance(data, dict):
            return {k: v for k, v in data.items() if v is not None}
        return data


def _function_name(value: str) -> str:
    if not FUNCTION_NAME_RE.fullmatch(value):
        raise fail(f"must be 1 to 64 letters, digits, '_', '-' or CJK characters, got {show(value)}.")
    return value


FunctionName = Annotated[str, AfterValidator(_function_name)]
NonEmptyStr = Annotated[str, StringConstraints(min_length=1)]
_BASE64 = re.compile("[A-Za-z0-9+/=]*")


def _url_cap(raw_base64: bool) -> Any:
    """Spec §2.3 caps a media *URL* (remote URL, file:// or path) at 4096 characters. Inline data (a data: URL, or
    for images raw base64, §3.2 step 4) is bounded by its decoded size and the body cap instead, or no real image
    could be sent inline."""

    def check(value: str) -> str:
        inline = value.startswith("data:") or (raw_base64 and _BASE64.fullmatch(value) is not None)
        if len(value) > MAX_URL_CHARS and not inline:
            raise fail(f"must be at most {MAX_URL_CHARS} characters long, got {len(value)}.")
        return value

    return AfterValidator(check)


MediaSource = Annotated[str, StringConstraints(min_length=1), _url_cap(raw_base64=False)]
ImageSource = Annotated[str, StringConstraints(min_length=1), _url_cap(raw_base64=True)]


def _by_json_type(value: Any) -> str | None:
    """Discriminator for `string | object` (and `string | array`) unions: only one branch is ever tried."""
    tags: dict[type, str] = {str: "#str", dict: "#obj", list: "#list"}
    return tags.get(type(value))


def _str_or_obj(model: type, what: str, source: Any = MediaSource) -> Any:
    return Annotated[
        Annotated[source, Tag("#str")] | Annotated[model, Tag("#obj")],
        Discriminator(_by_json_type, custom_error_type="request", custom_error_message=f"must be a string or {what}."),
    ]


class MediaURL(StrictModel):
    url: MediaSource


class ImageURL(StrictModel):
    url: ImageSource
    detail: str | None = None  # anything other than "auto" is accepted and ignored (MindIE-faithful)


class InputAudio(StrictModel):
    data: NonEmptyStr
    format: Literal["mp3", "wav", "flac"]


class TextPart(StrictModel):
    type: Literal["text"]
    text: NonEmptyStr


class ImageURLPart(StrictModel):
    type: Literal["image_url"]
    image_url: _str_or_obj(ImageURL, "an object {url, detail}", ImageSource)  # type: ignore[valid-type]  # Annotated, built at import


class VideoURLPart(StrictModel):
    type: Literal["video_url"]
    video_url: _str_or_obj(MediaURL, "an object {url}")  # type: ignore[valid-type]  # Annotated, built at import


class AudioURLPart(StrictModel):
    type: Literal["audio_url"]
    audio_url: _str_or_obj(MediaURL, "an object {url}")  # type: ignore[valid-type]  # Annotated, built at import


class InputAudioPart(StrictModel):
    type: Literal["input_audio"]
    input_audio: InputAudio


MediaPart = ImageURLPart | VideoURLPart | AudioURLPart | InputAudioPart
ContentPart = Annotated[
    Annotated[TextPart, Tag("#text")]
    | Annotated[ImageURLPart, Tag("#image_url")]
    | Annotated[VideoURLPart, Tag("#video_url")]
    | Annotated[AudioURLPart, Tag("#audio_url")]
    | Annotated[InputAudioPart, Tag("#input_audio")],
    # Shapes are pre-checked in Message._check_parts, so this error is only a safety net.
    Discriminator(
        lambda v: f"#{v.get('type')}" if isinstance(v, dict) else None,
        custom_error_type="request",
        custom_error_message="must be a content part object.",
    ),
]
Content = Annotated[
    Annotated[str, Tag("#str")] | Annotated[list[ContentPart], Tag("#list")],
    Discriminator(
        _by_json_type,
        custom_error_type="request",
        custom_error_message="must be a string or an array of content parts.",
    ),
]


class FunctionCall(StrictModel):
    name: FunctionName
    arguments: str  # JSON text; an object here is a validation error (case 27)


class ToolCall(StrictModel):
    id: NonEmptyStr
    type: Literal["function"]
    function: FunctionCall


class Message(StrictModel):
    role: Literal["system", "user", "assistant", "tool"]
    content: Content | None = None
    name: Annotated[str, StringConstraints(max_length=64)] | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None
    reasoning_content: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _route_defaults(cls, data: Any, info: ValidationInfo) -> Any:
        if not isinstance(data, dict):
            return data
        data = dict(data)
        if data.get("role") is None and (info.context or {}).get("route") == "pangu_v1":
            data["role"] = "user"  # Pangu V1 lists role as optional
        if data.get("role") in ("system", "user", "tool"):
            data.pop("tool_calls", None)  # only meaningful on assistant messages; ignored elsewhere
        if data.get("role") in ("system", "user", "assistant"):
            data.pop("tool_call_id", None)  # only meaningful on tool messages
        return data

    @field_validator("content", mode="before")
    @classmethod
    def _check_parts(cls, value: Any) -> Any:
        if isinstance(value, list):
            for i, part in enumerate(value):
                if not isinstance(part, dict):
                    raise fail(f"must be a content part object, got {show(part)}.", sub=f"[{i}]")
                if part.get("type") is None:
                    raise fail("", sub=f"[{i}].type", missing=True)
                if part["type"] not in PART_TYPES:
                    got = show(part["type"])
                    raise fail(f"must be one of {', '.join(PART_TYPES)}, got {got}.", sub=f"[{i}].type")
        return value

    @model_validator(mode="after")
    def _check_role_rules(self) -> Message:
        content, role = self.content, self.role
        if isinstance(content, list) and role != "user":
            for i, part in enumerate(content):
                if not isinstance(part, TextPart):
                    msg = f"must not be {part.type}: media parts are only allowed in user messages."
                    raise fail(msg, sub=f"content[{i}]")
        if role == "tool":
            if not self.tool_call_id:
                raise fail("must be a non-empty string.", sub="tool_call_id", missing=self.tool_call_id is None)
            if content is None:
                raise fail("", sub="content", missing=True)
            if not isinstance(content, str):
                raise fail("must be a string for tool messages.", sub="content")
        elif role == "assistant" and self.tool_calls:
            pass  # content may be absent, null, "" or a text-only array
        elif content is None:
            raise fail("", sub="content", missing=True)
        elif content == "" or content == []:
            raise fail(
                "must not be empty" + (" unless tool_calls is given." if role == "assistant" else "."), sub="content"
            )
        return self

    @property
    def text(self) -> str:
        """Content as one string: text-only arrays concatenated with no separator (§2.4.1); absent → ""."""
        if isinstance(self.content, list):
            return "".join(p.text for p in self.content if isinstance(p, TextPart))
        return self.content or ""

    def media_parts(self) -> list[MediaPart]:
        return [p for p in self.content if not isinstance(p, TextPart)] if isinstance(self.content, list) else []
