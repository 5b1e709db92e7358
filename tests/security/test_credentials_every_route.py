"""Issue 31, item 2: one credential closes every door (spec §1.2).

A stranger with no credential at all calls every inference and inspection route of a server that an operator
protected with only one kind of credential: only `--api-keys` (Pangu V1 used to answer), only Pangu app codes
(/v1, Pangu V2, /tokenize, /server/*, /metrics used to answer). Each route refuses with its own error shape, and
the credential that was configured still works on its own route. A public bind whose routes would be open refuses
to start without `--insecure-public`, on a Hugging Face Space too.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.api_helpers import assert_v1_error, ok
from tests.conftest import MODEL, extra_server
from tests.pangu_helpers import assert_pangu_error, post

KEY = "sk-only-key-1c2d"
APP_CODE = "appcode-only-5e6f"
CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
# Every guarded Bearer route of spec §1.2 table row 1: (method, path, body).
BEARER_ROUTES = [
    ("POST", "/v1/chat/completions", {"model": MODEL, **CHAT}),
    ("GET", "/v1/models", None),
    ("GET", f"/v1/models/{MODEL}", None),
    ("POST", "/tokenize", {"model": MODEL, "prompt": "hi"}),
    ("POST", "/detokenize", {"model": MODEL, "tokens": [1, 2]}),
    ("GET", "/metrics", None),
    ("GET", "/server/state", None),
    ("GET", "/server/steps", None),
]
STRANGERS = [{}, {"Authorization": "Bearer guess"}, {"X-Apig-AppCode": "guess"}, {"X-Auth-Token": "guess"}]


@pytest.fixture(scope="module")
def keys_only(settings: Any, service: Any) -> Iterator[httpx.Client]:
    with extra_server(settings, service, ui=False, api_keys=[KEY]) as http:
        yield http


@pytest.fixture(scope="module")
def app_codes_only(settings: Any, service: Any) -> Iterator[httpx.Client]:
    with extra_server(settings, service, ui=False, pangu_app_codes=[APP_CODE]) as http:
        yield http


def call(http: httpx.Client, method: str, path: str, body: Any, headers: dict[str, str]) -> httpx.Response:
    return http.request(method, path, json=body, headers=headers)


@pytest.mark.parametrize("headers", STRANGERS, ids=["none", "bearer", "app-code", "token"])
def test_api_keys_alone_close_pangu_v1(keys_only: httpx.Client, headers: dict[str, str]) -> None:
    r = post(keys_only, "pangu_v1", headers=headers, max_tokens=1)
    sent = "X-Apig-AppCode" in headers or "X-Auth-Token" in headers
    assert_pangu_error(r, "pangu_v1", 401, "PANGU.0011" if sent else "PANGU.0012")


def test_api_keys_alone_the_key_still_works(keys_only: httpx.Client) -> None:
    key = {"Authorization": f"Bearer {KEY}"}
    assert ok(post(keys_only, "v1", headers=key, max_tokens=1))["object"] == "chat.completion"
    r = post(keys_only, "pangu_v1", headers=key, max_tokens=1)  # V1 takes only its own headers: closed
    assert_pangu_error(r, "pangu_v1", 401, "PANGU.0012")


@pytest.mark.parametrize("headers", STRANGERS, ids=["none", "bearer", "app-code", "token"])
@pytest.mark.parametrize(("method", "path", "body"), BEARER_ROUTES, ids=[p for _, p, _ in BEARER_ROUTES])
def test_app_codes_alone_close_every_bearer_route(
    app_codes_only: httpx.Client, method: str, path: str, body: Any, headers: dict[str, str]
) -> None:
    r = call(app_codes_only, method, path, body, headers)
    assert_v1_error(r, 401)
    assert "guess" not in r.text


@pytest.mark.parametrize("headers", STRANGERS, ids=["none", "bearer", "app-code", "token"])
def test_app_codes_alone_close_pangu_v2(app_codes_only: httpx.Client, headers: dict[str, str]) -> None:
    r = post(app_codes_only, "pangu_v2", headers=headers, max_tokens=1)
    assert_pangu_error(r, "pangu_v2", 401, "PANGU.0011" if "Authorization" in headers else "PANGU.0012")


def test_app_codes_alone_the_code_still_works(app_codes_only: httpx.Client) -> None:
    code = {"X-Apig-AppCode": APP_CODE}
    assert ok(post(app_codes_only, "pangu_v1", headers=code, max_tokens=1))["object"] == "chat.completion"
    assert_v1_error(call(app_codes_only, "GET", "/metrics", None, {"Authorization": f"Bearer {APP_CODE}"}), 401)
    assert app_codes_only.get("/health").status_code == 200  # the one open route


def test_public_bind_with_open_routes_refuses_to_start(monkeypatch: pytest.MonkeyPatch) -> None:
    from engine.cli import settings_from
    from engine.http.exposure import check_exposure

    monkeypatch.setenv("SPACE_ID", "someone/space")  # a Space is no exception: only the named flag is
    with pytest.raises(SystemExit, match="insecure-public"):
        check_exposure(settings_from(["--host", "0.0.0.0"], environ={}).http)
    with pytest.raises(SystemExit, match="/v1/chat/completions"):
        check_exposure(settings_from([], environ={}).http)  # a Space binds 0.0.0.0 by default
    check_exposure(settings_from(["--host", "0.0.0.0", "--insecure-public"], environ={}).http)
    check_exposure(settings_from(["--host", "0.0.0.0", "--pangu-app-codes", APP_CODE], environ={}).http)  # all closed
