"""Authentication per route (spec §1.2; conformance cases 8-11, 14) on a second live server with credentials, the
Gradio page behind the same secrets, and secrets kept out of bodies and logs. [SEC]
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from engine.http.auth import client_key, matches
from tests.api_helpers import assert_v1_error, ok
from tests.conftest import MODEL, extra_server
from tests.pangu_helpers import assert_pangu_error, post

LAYER = "api"  # what this module's own fixtures or bodies need (tests/conftest.py)

KEY = "sk-test-3b1f9c0e7a"
TOKEN = "iam-token-55d2e1"
APP_CODE = "appcode-9a8b7c"
SECRETS = (KEY, TOKEN, APP_CODE, "wrong-secret-7f3e")


@pytest.fixture(scope="module")
def secured(settings: Any, service: Any) -> Iterator[httpx.Client]:
    """Keys for /v1 and V2, a token and an app code for Pangu V1, and the Gradio page mounted."""
    with extra_server(
        settings, service, api_keys=[KEY, "sk-other"], pangu_auth_tokens=[TOKEN], pangu_app_codes=[APP_CODE]
    ) as http:
        yield http


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


# ---- /v1 and /v1/models (case 11) -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Basic dXNlcjpwYXNz"},
        {"Authorization": "Bearer"},
        {"Authorization": f"Bearer {KEY} extra"},
        {"Authorization": "Bearer wrong-secret-7f3e"},
        {"Authorization": KEY},
        {"X-Auth-Token": TOKEN},  # a Pangu V1 credential is not a /v1 key
    ],
    ids=["none", "basic", "empty-bearer", "two-tokens", "wrong", "no-scheme", "pangu-token"],
)
@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/models", f"/v1/models/{MODEL}", "/metrics"])
def test_v1_refuses_without_a_valid_key(secured: httpx.Client, headers: dict[str, str], path: str) -> None:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
    r = secured.post(path, json=body, headers=headers) if "chat" in path else secured.get(path, headers=headers)
    assert_v1_error(r, 401)
    for secret in SECRETS:
        assert secret not in r.text


@pytest.mark.parametrize("scheme", ["Bearer", "bearer", "BEARER"])
def test_v1_accepts_the_key(secured: httpx.Client, scheme: str) -> None:
    headers = {"Authorization": f"{scheme} {KEY}"}
    assert ok(post(secured, "v1", headers=headers, max_tokens=1))["object"] == "chat.completion"
    assert secured.get("/v1/models", headers=headers).status_code == 200
    assert secured.get("/metrics", headers=headers).status_code == 200


def test_openai_sdk_with_and_without_the_key(secured: httpx.Client) -> None:
    import openai

    base = str(secured.base_url)
    good = openai.OpenAI(base_url=base + "/v1", api_key="sk-other", max_retries=0)
    assert good.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=1).id
    bad = openai.OpenAI(base_url=base + "/api/v2", api_key="nope", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as info:
        bad.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=1)
    assert info.value.code == "PANGU.0011"


# ---- Pangu V2 (cases 9, 10) and V1 (case 8) ---------------------------------------------------------------------


def test_v2_missing_is_0012_wrong_is_0011(secured: httpx.Client) -> None:  # cases 9, 10
    assert_pangu_error(post(secured, "pangu_v2", max_tokens=1), "pangu_v2", 401, "PANGU.0012")
    for headers in (bearer("wrong-secret-7f3e"), {"Authorization": "Basic eA=="}, {"X-Apig-AppCode": APP_CODE}):
        r = post(secured, "pangu_v2", headers=headers, max_tokens=1)
        expected = "PANGU.0012" if "Authorization" not in headers else "PANGU.0011"
        assert_pangu_error(r, "pangu_v2", 401, expected)
        assert all(secret not in r.text for secret in SECRETS)
    assert ok(post(secured, "pangu_v2", headers=bearer(KEY), max_tokens=1))["id"].startswith("chat-")


@pytest.mark.parametrize(
    ("headers", "code"),
    [
        ({}, "PANGU.0012"),
        (bearer(KEY), "PANGU.0012"),  # V1 takes only its own two headers
        ({"X-Auth-Token": "wrong-secret-7f3e"}, "PANGU.0011"),
        ({"X-Apig-AppCode": "wrong-secret-7f3e"}, "PANGU.0011"),
        ({"X-Auth-Token": APP_CODE}, "PANGU.0011"),  # each header against its own list
        ({"X-Apig-AppCode": TOKEN}, "PANGU.0011"),
    ],
)
def test_v1_refusals(secured: httpx.Client, headers: dict[str, str], code: str) -> None:
    r = post(secured, "pangu_v1", headers=headers, max_tokens=1)
    assert_pangu_error(r, "pangu_v1", 401, code)
    assert all(secret not in r.text for secret in SECRETS)


@pytest.mark.parametrize(
    "headers",
    [{"X-Auth-Token": TOKEN}, {"X-Apig-AppCode": APP_CODE}, {"X-Auth-Token": "wrong", "X-Apig-AppCode": APP_CODE}],
    ids=["token", "app-code", "either-matches"],
)
def test_v1_accepts_token_or_app_code(secured: httpx.Client, headers: dict[str, str]) -> None:  # cases 7, 8
    assert ok(post(secured, "pangu_v1", headers=headers, max_tokens=1))["object"] == "chat.completion"


@pytest.mark.parametrize("path", ["/health", "/v2/health/live", "/v2/health/ready"])
def test_health_stays_open(secured: httpx.Client, path: str) -> None:
    r = secured.get(path)
    assert r.status_code == 200 and r.content == b""


def test_secrets_never_reach_the_logs(secured: httpx.Client, caplog: pytest.LogCaptureFixture) -> None:  # case 10
    with caplog.at_level(logging.DEBUG):
        post(secured, "pangu_v2", headers=bearer("wrong-secret-7f3e"), max_tokens=1)
        post(secured, "pangu_v2", headers=bearer(KEY), max_tokens=1)
        post(secured, "pangu_v1", headers={"X-Auth-Token": TOKEN}, max_tokens=1)
        post(secured, "pangu_v1", headers={"X-Apig-AppCode": APP_CODE}, max_tokens=1)
        with httpx.Client(base_url=secured.base_url) as browser:
            browser.post("/login", data={"username": "u", "password": KEY})
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "playground.access" in {r.name for r in caplog.records}, "the access log did run"
    for secret in SECRETS:
        assert secret not in text


# ---- the Gradio page ---------------------------------------------------------------------------------------------


def test_ui_needs_a_login_with_the_same_secrets(secured: httpx.Client) -> None:
    with httpx.Client(base_url=secured.base_url, timeout=60) as browser:  # its own cookie jar
        assert browser.get("/config").status_code == 401
        assert browser.post("/login", data={"username": "me", "password": "wrong-secret-7f3e"}).status_code == 400
        assert browser.get("/config").status_code == 401
        r = browser.post("/login", data={"username": "me", "password": TOKEN})  # any configured secret
        assert r.status_code == 200 and r.json() == {"success": True}
        assert browser.get("/config").status_code == 200


def test_ui_client_with_auth_chats(secured: httpx.Client) -> None:
    from gradio_client import Client

    ui = Client(str(secured.base_url) + "/", auth=("me", KEY), verbose=False, download_files=False)
    out = ui.predict(message="hi", system="", temperature=0.0, max_tokens=4, api_name="/chat")
    history = out[0]  # the chatbot is the page's first output
    assert history[-1]["role"] == "assistant"


def test_open_server_ui_needs_no_login(http: httpx.Client) -> None:
    assert http.get("/config").status_code == 200


# ---- helpers and start-up ----------------------------------------------------------------------------------------


def test_matches_is_exact() -> None:
    assert matches("abc", ["x", "abc"]) and not matches("abc", []) and not matches("ab", ["abc"])
    assert not matches("abc ", ["abc"]) and not matches("ABC", ["abc"])
    assert matches("ключ", ["ключ"])


def test_client_key_hashes_credentials() -> None:
    key = client_key(KEY, "10.0.0.1")
    assert key.startswith("key:") and KEY not in key
    assert client_key(None, "10.0.0.1") == "ip:10.0.0.1"


def test_a_space_needs_credentials_or_the_explicit_override(monkeypatch: pytest.MonkeyPatch, caplog: Any) -> None:
    """Case 14: SPACE_ID alone is no override (issue 31): a Space is a public bind like any other."""
    from engine.cli import settings_from
    from engine.http.exposure import check_exposure

    monkeypatch.setenv("SPACE_ID", "user/space")
    with pytest.raises(SystemExit, match="insecure-public"):
        check_exposure(settings_from(["--host", "0.0.0.0"], environ={}).http)
    with caplog.at_level(logging.WARNING, logger="playground"):
        check_exposure(settings_from(["--host", "0.0.0.0"], environ={"PLAYGROUND_INSECURE_PUBLIC": "1"}).http)
    assert "--insecure-public" in caplog.text and "/v1/chat/completions" in caplog.text
    check_exposure(settings_from(["--host", "0.0.0.0", "--pangu-app-codes", "c"], environ={}).http)  # credentials given
