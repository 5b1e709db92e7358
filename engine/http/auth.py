"""Credentials per route (spec §1.2): Bearer keys on /v1 and Pangu V2, X-Auth-Token / X-Apig-AppCode on Pangu V1,
and there also the AK/SK signatures of Huawei Cloud's SDKs (`--pangu-aksk`, aksk.py).

One credential closes every door: once any credential of any kind is configured, every route but /health needs a
valid credential of its own form, and a route whose own list is empty is then closed (401), never open.

Secrets are compared in constant time over *every* configured value (no early exit, equal-length digests), never
logged and never echoed. The Gradio page accepts the same secrets as its password.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from starlette.datastructures import Headers
from starlette.requests import Request

from engine.config import HttpSettings
from engine.http import aksk
from engine.http.error_bodies import error_response
from engine.protocol.errors import AuthError
from engine.serving.rights import any_credentials, matches  # the rights, over the settings alone


def check_bearer(headers: Mapping[str, str], keys: list[str], *, required: bool = False) -> str | None:
    """`Authorization: Bearer <key>` with key in `keys`; returns the key. None (auth off) only when `keys` is empty
    and not `required`: with another credential configured (`required`), an empty `keys` lets nobody in."""
    if not keys and not required:
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


def _v1_headers(headers: Mapping[str, str], tokens: list[str], app_codes: list[str]) -> tuple[str | None, bool]:
    """(the matching X-Auth-Token / X-Apig-AppCode or None, whether either header was sent)."""
    token, code = headers.get("x-auth-token"), headers.get("x-apig-appcode")
    ok_token = bool(token) and matches(token or "", tokens)
    ok_code = bool(code) and matches(code or "", app_codes)
    return (token if ok_token else code if ok_code else None), bool(token or code)


def check_pangu_v1(
    headers: Mapping[str, str], tokens: list[str], app_codes: list[str], *, required: bool = False
) -> str | None:
    """`X-Auth-Token` (IAM token form) or `X-Apig-AppCode` (API-key form); either matching its list is enough.
    Both lists empty: None (auth off) unless `required` (another credential is configured), then nobody passes."""
    if not tokens and not app_codes and not required:
        return None
    credential, sent = _v1_headers(headers, tokens, app_codes)
    if credential:
        return credential
    if not sent:
        raise AuthError("Missing credentials: send 'X-Auth-Token' or 'X-Apig-AppCode'.", missing=True)
    raise AuthError("Invalid credentials.", missing=False)


class PanguV1Auth:
    """Pangu V1's credentials: a token or app code as `check_pangu_v1`, or (with `--pangu-aksk`) an SDK-HMAC-SHA256
    signature over the request, body included; returns the token, code or access key (None when auth is off).

    Secret keys are loaded once, here, so a bad `--pangu-aksk` stops the server at start-up."""

    def __init__(self, settings: HttpSettings) -> None:
        self.tokens, self.app_codes = settings.pangu_auth_tokens, settings.pangu_app_codes
        self.keys = aksk.load_pairs(settings.pangu_aksk)
        self.required = any_credentials(settings)

    async def check(self, request: Request, body_limit: int) -> str | None:
        if not self.keys:
            return check_pangu_v1(request.headers, self.tokens, self.app_codes, required=self.required)
        credential, sent = _v1_headers(request.headers, self.tokens, self.app_codes)
        if credential:
            return credential
        if aksk.is_signature(request.headers.get("authorization", "")):
            from engine.http.chat import read_body  # chat.py imports this module

            body = await read_body(request, body_limit)  # 413 past the cap, as the handler would answer
            request._body = body  # Starlette's cache of request.body(): the handler's read replays it
            path, query = request.scope["path"], request.scope["query_string"].decode("latin-1")
            return aksk.verify(self.keys, request.method, path, query, request.headers.items(), body)
        if sent:
            raise AuthError("Invalid credentials.", missing=False)
        raise AuthError(
            "Missing credentials: send 'X-Auth-Token', 'X-Apig-AppCode' or an SDK-HMAC-SHA256 signature.", missing=True
        )


GUARDED_ROUTES = (
    "/v1/chat/completions",
    "/api/v2/chat/completions",
    "Pangu V1 chat",
    "/v1/models",
    "/tokenize",
    "/detokenize",
    "/metrics",
    "/server/state",
    "/server/steps",
)


def open_routes(settings: HttpSettings) -> list[str]:
    """The inference and inspection routes a stranger may call without a credential: all of them while no
    credential is configured, none once any is (`/health` is always open and not counted)."""
    if any_credentials(settings):
        return []
    return [*GUARDED_ROUTES, *(["the page and its Gradio API"] if settings.ui else [])]


def api_bearer(headers: Mapping[str, str], settings: HttpSettings, *, admin_too: bool = False) -> str | None:
    """The Bearer check of /v1, /v1/models, Pangu V2, /tokenize, /detokenize, /metrics and /server/*: a key of
    `--api-keys` (`admin_too`: or of `--admin-keys`, once any credential is set). Open only while no credential of
    any kind is configured; with only Pangu V1 credentials, closed (spec §1.2)."""
    required = any_credentials(settings)
    keys = [*settings.api_keys, *(settings.admin_keys if admin_too and required else [])]
    return check_bearer(headers, keys, required=required)


def server_secrets(settings: HttpSettings) -> list[str]:
    """Every credential the server accepts on some route: API keys, Pangu tokens and app codes, AK/SK secrets."""
    secret_keys = aksk.load_pairs(settings.pangu_aksk).values()
    return [*settings.api_keys, *settings.pangu_auth_tokens, *settings.pangu_app_codes, *secret_keys]


def ui_auth(settings: HttpSettings) -> PageLogins | None:
    """Gradio `auth` for the page: any user name, and one of the server's secrets as the password (None = open)."""
    if not any_credentials(settings):
        return None
    return PageLogins(server_secrets(settings))


class PageLogins:
    """The page's login (Gradio's `auth` callable): any user name, one of `secrets` as the password. A session is
    then known by the credential it proved, never by the name typed: Gradio keeps each login's name in its token
    table (`App.tokens`, which `gr.Request.username` reads), and `tokens` is that table for this login, storing the
    credential's client key (`client_key`, as the API counts a key) in place of the typed name. So ten names typed
    with one key are one client of `--max-concurrent-per-client`, as ten API requests with that key are.

    Gradio calls the check and stores the token with no await between them (one event loop), so the credential
    the check proved is the one the next stored token gets."""

    def __init__(self, secrets: list[str]) -> None:
        self.secrets = secrets
        self._proved: str | None = None
        self.tokens: dict[str, str] = _ProvedTokens(self)

    def __call__(self, username: str, password: str) -> bool:
        ok = matches(password or "", self.secrets)
        self._proved = client_key(password, None) if ok else None
        return ok

    def take(self) -> str:
        proved, self._proved = self._proved, None
        if proved is None:
            raise RuntimeError("a page login token without a checked credential")
        return proved


class _ProvedTokens(dict[str, str]):
    def __init__(self, logins: PageLogins) -> None:
        super().__init__()
        self.logins = logins

    def __setitem__(self, token: str, typed_name: str) -> None:
        super().__setitem__(token, self.logins.take())


def client_key(credential: str | None, host: str | None) -> str:
    """Who a request counts against for the per-client limit: its credential (hashed), else its address."""
    if credential:
        return "key:" + hashlib.sha256(credential.encode("utf-8", "surrogateescape")).hexdigest()[:16]
    return "ip:" + (host or "unknown")


def cache_scope(credential: str | None, settings: HttpSettings) -> str:
    """The prefix-cache scope of a caller with this (already checked) credential: the credential's own (hashed, as
    its per-client key) under `--prefix-cache-scope credential`, the shared one ("") under `shared` or when no
    credential was needed (no credentials configured: one scope for everyone)."""
    if settings.prefix_cache_scope == "shared" or not credential:
        return ""
    return client_key(credential, None)


def bearer_token(headers: Mapping[str, str]) -> str | None:
    """The credential of `Authorization: Bearer <credential>`, if sent (checked or not: the caller knows)."""
    scheme, _, token = (headers.get("authorization") or "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


def bearer_client(headers: Mapping[str, str], host: str | None) -> str:
    """The per-client key of a request that authenticates (or not) with `Authorization: Bearer <credential>`."""
    return client_key(bearer_token(headers), host)


class PrefixGuard:
    """ASGI middleware: HTTP requests under `prefix` need `Authorization: Bearer <secret>`, one of `secrets`
    (none: open); others pass untouched. A refusal is the v1 error body with status 401, as the API's."""

    def __init__(self, app: Any, prefix: str, secrets: list[str]) -> None:
        self.app, self.prefix, self.secrets = app, prefix.rstrip("/"), secrets

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        path = scope.get("path", "")
        guarded = path == self.prefix or path.startswith(self.prefix + "/")
        if scope["type"] != "http" or not self.secrets or not guarded:
            return await self.app(scope, receive, send)
        try:
            check_bearer(Headers(scope=scope), self.secrets)
        except AuthError as exc:
            response = error_response("v1", exc)
            response.headers["WWW-Authenticate"] = "Bearer"
            return await response(scope, receive, send)
        return await self.app(scope, receive, send)
