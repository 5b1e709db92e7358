"""Who may do what, decided over the settings alone (no headers, no transport): whether any credential is
configured, whether a (checked) credential is an administrator's, and the constant-time comparison behind both.

Every front end asks here: the HTTP routes (engine/http/auth.py reads the credential off the request), the page's
Server tab and MCP (engine/serving/operations.py, the operator's actions), the model pool (may this caller load a
model). Secrets are compared in constant time over *every* configured value, never logged and never echoed."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable

from engine.config import Credentials


def _digest(value: str) -> bytes:
    return hashlib.sha256(value.encode("utf-8", "surrogateescape")).digest()


def matches(value: str, allowed: Iterable[str]) -> bool:
    """Whether `value` is one of `allowed`, taking the same time whichever (or whether any) matches."""
    candidate = _digest(value)
    found = False
    for secret in allowed:
        found |= hmac.compare_digest(candidate, _digest(secret))
    return found


def any_credentials(settings: Credentials) -> bool:
    return bool(settings.api_keys or settings.pangu_auth_tokens or settings.pangu_app_codes or settings.pangu_aksk)


def admin_needed(settings: Credentials) -> bool:
    """Whether an administrator's action takes an admin key: the server has credentials of any kind, or admin
    keys; with neither, every action is open to everyone, as every route is."""
    return bool(settings.admin_keys) or any_credentials(settings)


def is_admin(credential: str | None, settings: Credentials) -> bool:
    """Whether a caller with this (already checked) credential may do an administrator's action: anyone while no
    credentials and no admin keys are configured, else only an admin key (`--admin-keys`)."""
    if not admin_needed(settings):
        return True
    return credential is not None and matches(credential, settings.admin_keys)
