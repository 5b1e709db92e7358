"""AK/SK request signatures on Pangu V1: what Huawei Cloud's SDKs send (`huaweicloudsdkcore`'s default signer).

The client signs with its secret key SK and sends

    Authorization: SDK-HMAC-SHA256 Access=<AK>, SignedHeaders=<h1;h2;...>, Signature=<hex>
    X-Sdk-Date: 20250102T030405Z

The signature is hex(HMAC-SHA256(SK, string-to-sign)), where

    string-to-sign    = "SDK-HMAC-SHA256" \\n X-Sdk-Date \\n hex(SHA256(canonical request))
    canonical request = METHOD \\n URI \\n QUERY \\n HEADERS \\n SIGNED-HEADERS \\n hex(SHA256(body))

URI is the decoded path, each `/`-separated segment percent-encoded again (only `~` and unreserved characters
kept) and a trailing `/` added; QUERY is the decoded (key, value) pairs sorted and re-encoded the same way, joined
`k=v&k=v`; HEADERS is `name:value\\n` for each signed header, in the order of SignedHeaders (lower-case names,
values stripped, UTF-8); an empty body hashes as SHA256(b""). This module rebuilds that request from what the
server received and compares signatures with `hmac.compare_digest`.

Server policy on top of the SDK's algorithm: `host` and `x-sdk-date` must be signed, the date must lie within
±15 minutes of the server clock, unsigned payloads (`X-Sdk-Content-Sha256: UNSIGNED-PAYLOAD`) are refused, a
claimed body hash must be the body's, and only SDK-HMAC-SHA256 is accepted (not SM3, ECDSA or derived keys).
Secret keys are never logged or put in an error message; an unknown AK and a wrong signature answer alike.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta, timezone
from pathlib import Path
from urllib.parse import parse_qsl, quote

from engine.protocol.errors import AuthError

ALGORITHM = "SDK-HMAC-SHA256"
DATE_FORMAT = "%Y%m%dT%H%M%SZ"
DATE_WINDOW = timedelta(minutes=15)
REQUIRED_SIGNED = ("host", "x-sdk-date")
FLAG = "--pangu-aksk"

# "<ALGO> k=v, ..." where ALGO looks like one of the SDK's schemes (SDK-HMAC-SHA256, SDK-HMAC-SM3, V11-HMAC-SHA256).
_SCHEME = re.compile(r"(?:SDK|V\d+)-[A-Z0-9-]+")
_NAME = r"[a-z0-9!#$%&'*+.^_`|~-]+"  # an HTTP header name (token), lower-case
_AUTH = re.compile(
    rf"{ALGORITHM} Access=(?P<ak>[^\s,=]+), SignedHeaders=(?P<signed>{_NAME}(?:;{_NAME})*), "
    r"Signature=(?P<sig>[0-9a-f]{64})"
)
_DATE = re.compile(r"\d{8}T\d{6}Z")
_DUMMY_SK = "not-a-configured-secret"


def is_signature(authorization: str) -> bool:
    """Whether an Authorization header is meant as an SDK signature (as opposed to, say, a Bearer key)."""
    return bool(_SCHEME.fullmatch(authorization.partition(" ")[0]))


def load_pairs(entries: Sequence[str]) -> dict[str, str]:
    """`--pangu-aksk` entries -> {AK: SK}. An entry is `AK:SK`, or `@FILE` naming a file of such pairs (one or
    more per line, comma-separated; blank lines and `#` comments skipped). Errors never quote a secret."""
    pairs: dict[str, str] = {}

    def add(item: str, where: str) -> None:
        ak, sep, sk = item.strip().partition(":")
        ak, sk = ak.strip(), sk.strip()
        if not sep or not ak or not sk or not re.fullmatch(r"[^\s,=:]+", ak):
            raise ValueError(f"{FLAG}: {where} is not an AK:SK pair")
        if pairs.get(ak, sk) != sk:
            raise ValueError(f"{FLAG}: access key {ak!r} is given two different secret keys")
        pairs[ak] = sk

    for n, entry in enumerate(entries, 1):
        entry = entry.strip()
        if not entry.startswith("@"):
            add(entry, f"entry {n}")
            continue
        path = Path(entry[1:]).expanduser()
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"{FLAG}: cannot read {path}: {exc.__class__.__name__}") from None
        for line_no, line in enumerate(text.splitlines(), 1):
            line = line.strip()
            if line and not line.startswith("#"):
                for item in filter(str.strip, line.split(",")):
                    add(item, f"{path} line {line_no}")
    return pairs


def canonical_uri(path: str) -> str:
    uri = "/".join(quote(segment, safe="~") for segment in path.split("/"))
    return uri if uri.endswith("/") else uri + "/"


def canonical_query(query_string: str) -> str:
    pairs = sorted(parse_qsl(query_string, keep_blank_values=True))
    return "&".join(f"{quote(k, safe='~')}={quote(v, safe='~')}" for k, v in pairs)


def canonical_request(
    method: str, path: str, query_string: str, headers: Sequence[tuple[str, str]], payload_hash: str
) -> str:
    """The SDK's canonical request; `headers` are the signed (lower-case name, value) pairs in signing order."""
    lines = "".join(f"{name}:{value.strip()}\n" for name, value in headers)
    signed = ";".join(name for name, _ in headers)
    return "\n".join([method.upper(), canonical_uri(path), canonical_query(query_string), lines, signed, payload_hash])


def signature(secret_key: str, date: str, canonical: str) -> str:
    digest = hashlib.sha256(canonical.encode("utf-8")).hexdigest()
    to_sign = f"{ALGORITHM}\n{date}\n{digest}"
    return hmac.new(secret_key.encode("utf-8"), to_sign.encode("utf-8"), hashlib.sha256).hexdigest()


def _signed_values(headers: Sequence[tuple[str, str]], names: list[str]) -> list[tuple[str, str]]:
    """Each signed header's value as the client signed it: present once, UTF-8 text (the server decoded the bytes
    as Latin-1)."""
    out = []
    for name in names:
        raw = [value for key, value in headers if key == name]
        if len(raw) != 1:
            raise AuthError(f"Signed header {name!r} must appear exactly once.", missing=False)
        try:
            out.append((name, raw[0].encode("latin-1").decode("utf-8")))
        except (UnicodeEncodeError, UnicodeDecodeError):
            out.append((name, raw[0]))
    return out


def verify(
    keys: Mapping[str, str],
    method: str,
    path: str,
    query_string: str,
    headers: Sequence[tuple[str, str]],
    body: bytes,
    now: datetime | None = None,
) -> str:
    """Check an SDK-HMAC-SHA256 request; returns its AK, or raises AuthError (401 PANGU.0011).

    `path` is the decoded path, `headers` every (lower-case name, Latin-1 value) pair the request carried."""
    first = {name: value for name, value in reversed(headers)}
    authorization = first.get("authorization", "").strip()
    if authorization.partition(" ")[0] != ALGORITHM:
        raise AuthError(f"Unsupported signing algorithm; only {ALGORITHM} is accepted.", missing=False)
    match = _AUTH.fullmatch(authorization)
    if not match:
        raise AuthError(f"Malformed {ALGORITHM} Authorization header.", missing=False)
    names = match["signed"].split(";")
    if len(set(names)) != len(names) or not set(REQUIRED_SIGNED) <= set(names) or "authorization" in names:
        raise AuthError("SignedHeaders must list host and x-sdk-date once each (and not authorization).", missing=False)
    values = _signed_values(headers, names)
    date = dict(values)["x-sdk-date"].strip()
    when = datetime.strptime(date, DATE_FORMAT).replace(tzinfo=timezone.utc) if _DATE.fullmatch(date) else None
    if when is None or abs((now or datetime.now(timezone.utc)) - when) > DATE_WINDOW:
        raise AuthError(
            "X-Sdk-Date must be YYYYMMDDTHHMMSSZ (UTC) within 15 minutes of the server clock.", missing=False
        )
    payload_hash = hashlib.sha256(body).hexdigest()  # of b"" for an empty body, as the SDK's constant
    claimed = first.get("x-sdk-content-sha256")
    if body and claimed is not None and claimed.strip() != payload_hash:
        raise AuthError(
            "Unsigned payloads are not accepted; X-Sdk-Content-Sha256 must be the body's SHA-256.", missing=False
        )
    ak = match["ak"]
    secret = keys.get(ak)
    canonical = canonical_request(method, path, query_string, values, payload_hash)
    expected = signature(secret if secret is not None else _DUMMY_SK, date, canonical)  # same work for unknown AKs
    if not hmac.compare_digest(expected, match["sig"]) or secret is None:
        raise AuthError("Invalid credentials.", missing=False)
    return ak
