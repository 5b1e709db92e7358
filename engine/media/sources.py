"""Where a media part's bytes come from, and whether they are what they claim to be (spec §2.3, §3.1-§3.3).

Pure functions on strings and bytes: classification of a source (§3.2, in the spec's order), strict base64,
data-URL parsing, magic-byte sniffing against the MIME tables, and the size and count limits.
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass
from typing import Any, Literal

from engine.media.errors import MediaError

Kind = Literal["image", "video", "audio"]
Origin = Literal["remote", "local", "data_url", "base64"]

MiB = 1 << 20
MAX_BYTES: dict[str, int] = {"image": 20 * MiB, "video": 512 * MiB, "audio": 20 * MiB}
MAX_ITEMS = 20
MAX_TOTAL_BYTES = 1000 * MiB
MAX_URL_CHARS = 4096

# §3.3: MIME type -> container name, per kind. The container names are what `sniff` returns.
MIME_TABLE: dict[str, dict[str, str]] = {
    "image": {"image/jpeg": "jpeg", "image/png": "png"},
    "video": {"video/mp4": "mp4", "video/x-msvideo": "avi", "video/x-ms-wmv": "wmv"},
    "audio": {"audio/mpeg": "mp3", "audio/x-wav": "wav", "audio/flac": "flac"},
}
EXTENSIONS: dict[str, tuple[str, ...]] = {
    "image": (".jpg", ".jpeg", ".png"),
    "video": (".mp4", ".avi", ".wmv"),
    "audio": (".mp3", ".wav", ".flac"),
}
CONTAINER_MIME = {container: mime for table in MIME_TABLE.values() for mime, container in table.items()}
AUDIO_FORMATS = {"mp3": "mp3", "wav": "wav", "flac": "flac"}  # input_audio.format -> container
PART_KINDS: dict[str, Kind] = {"image_url": "image", "video_url": "video", "audio_url": "audio", "input_audio": "audio"}

DATA_URL_RE = re.compile(
    r"data:(image|video|audio)/(jpeg|png|mp4|x-msvideo|x-ms-wmv|mpeg|x-wav|flac);base64,([A-Za-z0-9+/=]+)"
)
_B64_RE = re.compile(r"[A-Za-z0-9+/]*={0,2}")
_ASF_GUID = bytes.fromhex("3026b2758e66cf11a6d900aa0062ce6c")


@dataclass(frozen=True)
class MediaInput:
    """One media part, independent of the pydantic models: `kind`, the source string, and for `input_audio` its
    declared `format` (the source is then base64 only)."""

    kind: Kind
    source: str
    audio_format: str | None = None


def media_input(part: Any) -> MediaInput:
    """A content part (the pydantic model of engine.protocol.messages, or its JSON dict) as a `MediaInput`."""
    if isinstance(part, MediaInput):
        return part
    get = part.get if isinstance(part, dict) else lambda key: getattr(part, key, None)
    ptype = get("type")
    if ptype not in PART_KINDS:
        raise MediaError(f"not a media part: {str(ptype)[:32]!r}")
    value: Any = get(ptype)
    if ptype == "input_audio":
        data, fmt = (value.get("data"), value.get("format")) if isinstance(value, dict) else (value.data, value.format)
        return MediaInput("audio", data or "", fmt)
    url = value if isinstance(value, str) else value.get("url") if isinstance(value, dict) else value.url
    return MediaInput(PART_KINDS[ptype], url or "")


def classify(item: MediaInput) -> Origin:
    """§3.2, applied in this order: http(s) -> remote; file:// or an allowed extension -> local; data: -> data
    URL; image -> raw base64; anything else is refused."""
    source = item.source
    if item.audio_format is not None:
        return "base64"  # input_audio: base64 only, whatever it looks like
    low = source[:8].lower()
    if low.startswith(("http://", "https://")):
        return "remote"
    path = source.split("?", 1)[0].split("#", 1)[0]
    if low.startswith("file://") or path.lower().endswith(EXTENSIONS[item.kind]):
        return "local"
    if source.startswith("data:"):
        return "data_url"
    if item.kind == "image":
        return "base64"
    exts = "/".join(e.lstrip(".") for e in EXTENSIONS[item.kind])
    raise MediaError(f"unsupported {item.kind} source: expected a data URL, an http(s) URL or a .{exts} file path")


def check_url_length(source: str) -> None:
    if len(source) > MAX_URL_CHARS:
        raise MediaError(f"media URL must be at most {MAX_URL_CHARS} characters long, got {len(source)}")


def decode_base64(text: str, kind: str) -> bytes:
    """Strict RFC 4648 base64 (no whitespace, correct padding), refused before decoding when too large."""
    if not text or len(text) % 4 or not _B64_RE.fullmatch(text):
        raise MediaError("invalid base64 data")
    padding = len(text) - len(text.rstrip("="))
    check_size(len(text) // 4 * 3 - padding, kind)
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise MediaError("invalid base64 data") from None


def parse_data_url(source: str, kind: str) -> tuple[str, str]:
    """`data:<mime>;base64,<b64>` -> (mime, b64). The MIME type must be in the table of the part's kind."""
    match = DATA_URL_RE.fullmatch(source)
    if match is None:
        raise MediaError("invalid data URL: expected data:<type>/<subtype>;base64,<data> with a supported type")
    mime = f"{match[1]}/{match[2]}"
    if match[1] != kind:
        raise MediaError(f"{kind}_url parts cannot carry {mime} data")
    if mime not in MIME_TABLE[kind]:
        raise MediaError(f"unsupported {kind} type {mime}; supported: {', '.join(MIME_TABLE[kind])}")
    return mime, match[3]


def check_size(size: int, kind: str) -> None:
    if size > MAX_BYTES[kind]:
        raise MediaError(f"{kind} must be at most {MAX_BYTES[kind] // MiB} MiB, got {size / MiB:.1f} MiB")


def check_count(count: int) -> None:
    if count > MAX_ITEMS:
        raise MediaError(f"at most {MAX_ITEMS} media items are allowed per request, got {count}")


def sniff(data: bytes) -> str | None:
    """The container the magic bytes announce (a name of the MIME table), or None."""
    head = data[:16]
    if head.startswith(b"\xff\xd8\xff"):
        return "jpeg"
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return "png"
    if head[4:8] == b"ftyp":
        return "mp4"
    if head.startswith(b"RIFF") and head[8:12] == b"AVI ":
        return "avi"
    if head.startswith(b"RIFF") and head[8:12] == b"WAVE":
        return "wav"
    if head.startswith(_ASF_GUID):
        return "wmv"
    if head.startswith(b"fLaC"):
        return "flac"
    if head.startswith(b"ID3") or _mpeg_audio_frame(head):
        return "mp3"
    return None


def _mpeg_audio_frame(head: bytes) -> bool:
    # 11 sync bits, then a version and a layer that are not the reserved values.
    return len(head) >= 4 and head[0] == 0xFF and head[1] & 0xE0 == 0xE0 and head[1] & 0x18 != 0x08 and head[1] & 6 != 0


def check_content(data: bytes, kind: str, declared: str | None = None) -> str:
    """Sniff `data` and return its MIME type. With `declared` (a data-URL MIME type or an input_audio format's
    container) the bytes must be exactly that; otherwise any container allowed for the kind will do."""
    container = sniff(data)
    if declared is not None:
        if container != declared:
            raise MediaError(f"{kind} content does not match its declared type {CONTAINER_MIME[declared]}")
        return CONTAINER_MIME[declared]
    if container is None or CONTAINER_MIME[container] not in MIME_TABLE[kind]:
        names = ", ".join(c.upper() for c in MIME_TABLE[kind].values())
        raise MediaError(f"{kind} content is not a supported format ({names})")
    return CONTAINER_MIME[container]
