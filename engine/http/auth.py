"""Credentials per route (spec §1.2): Bearer keys on /v1 and Pangu V2, X-Auth-Token / X-Apig-AppCode on Pangu V1.

Secrets are compared in constant time over *every* configured value (no early exit, equal-length digests), never
logged and never echoed. The Gradio page accepts the same secrets as its password.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable, Iterable, Mapping

from engine.config import Settings
from engine.protocol.errors import AuthError


def _digest(value: str) -> bytes:
    return hashlib.sha256(value.encode("utf-8", "surrogateescape")).digest()


def matches(value: str, allowed: Iterable[str]) -> bool:
    """Whether `value` is one of `allowed`, taking the same time whichever (or whether any) matches."""
    candidate = _digest(value)
    found = False
    for secret in allowed:
        found |= hmac.compare_digest(candidate, _digest(secret))
    return found


def check_bearer(headers: Mapping[str, str], keys: list[str]) -> str | None:
    """`Authorization: Bearer <key>` with key in `keys`; returns the key (None when auth is off)."""
    if not keys:
        return None
    header = headers.get("authorization")
    if not header:
        raise AuthError("Missing credentials: send 'Authorization: Bearer <key>'.", missing=True)
    scheme, _, token = header.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or " " in token:
        raise AuthError("Invalid credentials.", missing=False)
    if not matches(token, keys):
        raise AuthError("Invalid credentials.", missing=False)
    return token


def check_pangu_v1(headers: Mapping[str, str], tokens: list[str], app_codes: list[str]) -> str | None:
    """`X-Auth-Token` (IAM token form) or `X-Apig-AppCode` (API-key form); either matching its list is enough."""
    if not tokens and not app_codes:
        return None
    token, code = headers.get("x-auth-token"), headers.get("x-apig-appcode")
    if not token and not code:
        raise AuthError("Missing credentials: send 'X-Auth-Token' or 'X-Apig-AppCode'.", missing=True)
    ok_token = bool(token) and matches(token or "", tokens)
    ok_code = bool(code) and matches(code or "", app_codes)
    if ok_token:
        return token
    if ok_code:
        return code
    raise AuthError("Invalid credentials.", missing=False)


def any_credentials(settings: Settings) -> bool:
    return bool(settings.api_keys or settings.pangu_auth_tokens or settings.pangu_app_codes)


def ui_auth(settings: Settings) -> Callable[[str, str], bool] | None:
    """Gradio `auth` callable: any user name, and one of the server's secrets as the password (None = open)."""
    if not any_credentials(settings):
        return None
    secrets = [*settings.api_keys, *settings.pangu_auth_tokens, *settings.pangu_app_codes]

    def check(username: str, password: str) -> bool:
        return matches(password or "", secrets)

    return check


def client_key(credential: str | None, host: str | None) -> str:
    """Who a request counts against for the per-client limit: its credential (hashed), else its address."""
    if credential:
        return "key:" + hashlib.sha256(credential.encode("utf-8", "surrogateescape")).hexdigest()[:16]
    return "ip:" + (host or "unknown")
