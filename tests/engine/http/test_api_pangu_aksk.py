"""AK/SK signatures on Pangu V1 (`--pangu-aksk`): Huawei Cloud's own SDK (`huaweicloudsdkpangulargemodels`, V1
`execute_chat_completion`) as the client of a live server started with credentials, and raw httpx requests signed
by the SDK's signer, then spoiled, for the refusals (wrong signature, stale date, unknown key, malformed). [SEC]

The SDK's V1 client reaches a plain http://127.0.0.1 server through `with_endpoints([url])` (no region, so no
IAM look-up) and `BasicCredentials(ak, sk, project_id)` (the project id fills the path's {project_id}).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import httpx
import pytest

from engine.http import aksk
from engine.http.auth import PanguV1Auth, ui_auth
from engine.protocol.errors import AuthError
from tests.conftest import extra_server
from tests.pangu_helpers import V1, assert_pangu_error, check_pangu_stream

LAYER = "api"  # what this module's own fixtures or bodies need (tests/conftest.py)

AK, SK = "PLAYGROUNDAKSK0000001", "sk-secret-4c2d9e81"
FILE_AK, FILE_SK = "PLAYGROUNDAKSK0000002", "file-secret-77ab:with-colon"
TOKEN = "iam-token-aksk-5e1f"
SECRETS = (SK, FILE_SK, TOKEN, "wrong-sk-0b9d")
BODY = b'{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}'


@pytest.fixture(scope="module")
def keyfile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("aksk") / "pairs.txt"
    path.write_text(f"# access key : secret key\n\n{FILE_AK}:{FILE_SK}\n")
    return path


@pytest.fixture(scope="module")
def signed(settings: Any, service: Any, keyfile: Path) -> Iterator[httpx.Client]:
    """AK/SK pairs inline and from a file, plus an IAM token."""
    with extra_server(settings, service, pangu_aksk=[f"{AK}:{SK}", f"@{keyfile}"], pangu_auth_tokens=[TOKEN]) as http:
        yield http


def sdk_client(base_url: str, ak: str, sk: str) -> Any:
    from huaweicloudsdkcore.auth.credentials import BasicCredentials
    from huaweicloudsdkpangulargemodels.v1 import PanguLargeModelsClient

    credentials = BasicCredentials(ak, sk, "proj-1")
    return PanguLargeModelsClient.new_builder().with_credentials(credentials).with_endpoints([base_url]).build()


def sdk_chat(client: Any) -> Any:
    from huaweicloudsdkpangulargemodels.v1 import ChatCompletionReq, ExecuteChatCompletionRequest, Message

    body = ChatCompletionReq(messages=[Message(role="user", content="hi")], max_tokens=1, temperature=0.5)
    return client.execute_chat_completion(ExecuteChatCompletionRequest(deployment_id="dep_1", body=body))


def sdk_refusal(client: Any) -> Any:
    from huaweicloudsdkcore.exceptions.exceptions import ClientRequestException

    with pytest.raises(ClientRequestException) as info:
        sdk_chat(client)
    return info.value


def sign(
    http: httpx.Client,
    body: bytes = BODY,
    ak: str = AK,
    sk: str = SK,
    date: datetime | None = None,
    query: list[tuple[str, str]] | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[str, dict]:
    """(URL, headers) of a V1 request signed by the SDK's own signer, as its client would send it."""
    from huaweicloudsdkcore.auth.credentials import BasicCredentials
    from huaweicloudsdkcore.sdk_request import SdkRequest
    from huaweicloudsdkcore.signer.signer import Signer

    params = {"Content-Type": "application/json", **(headers or {})}
    if date is not None:
        params["X-Sdk-Date"] = date.strftime(aksk.DATE_FORMAT)
    request = SdkRequest(
        method="POST",
        schema="http",
        host=http.base_url.netloc.decode(),
        resource_path=V1,
        query_params=query or [],
        header_params=params,
        body=body,
    )
    Signer(BasicCredentials(ak, sk)).sign(request)
    return request.uri, dict(request.header_params)


def send(http: httpx.Client, url: str, headers: dict[str, str], body: bytes = BODY) -> httpx.Response:
    return http.post(url, content=body, headers=headers)


def refused(r: httpx.Response, code: str = "PANGU.0011", *fragments: str) -> None:
    assert_pangu_error(r, "pangu_v1", 401, code, *fragments)
    assert all(secret not in r.text for secret in SECRETS)


# ---- the real SDK ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("ak", "sk"), [(AK, SK), (FILE_AK, FILE_SK)], ids=["inline", "from-file"])
def test_sdk_with_aksk_chats(signed: httpx.Client, ak: str, sk: str) -> None:
    reply = sdk_chat(sdk_client(str(signed.base_url), ak, sk))
    assert reply.id.startswith("chat-") and len(reply.choices) == 1
    assert reply.usage.completion_tokens == 1


@pytest.mark.parametrize(
    ("ak", "sk"),
    [(AK, "wrong-sk-0b9d"), ("NOSUCHACCESSKEY00001", SK), (FILE_AK, SK)],
    ids=["wrong-sk", "unknown-ak", "other-keys-sk"],
)
def test_sdk_with_bad_aksk_gets_0011(signed: httpx.Client, ak: str, sk: str) -> None:
    error = sdk_refusal(sdk_client(str(signed.base_url), ak, sk))
    assert (error.status_code, error.error_code) == (401, "PANGU.0011")
    assert all(secret not in str(error.error_msg) for secret in SECRETS)


def test_sdk_works_unchanged_on_an_open_server(live: Any) -> None:
    assert sdk_chat(sdk_client(live.url, "ANYAK", "any-sk")).choices


def test_tokens_keep_working(signed: httpx.Client) -> None:
    assert signed.post(V1, content=BODY, headers={"X-Auth-Token": TOKEN}).status_code == 200
    refused(signed.post(V1, content=BODY, headers={"X-Auth-Token": "wrong-token"}))
    refused(signed.post(V1, content=BODY), "PANGU.0012", "SDK-HMAC-SHA256")
    refused(signed.post(V1, content=BODY, headers={"Authorization": f"Bearer {SK}"}), "PANGU.0012")


# ---- raw requests signed by the SDK's signer ----------------------------------------------------------------------


def test_raw_signed_request_passes_query_and_stream_too(signed: httpx.Client) -> None:
    assert send(signed, *sign(signed)).status_code == 200
    url, headers = sign(signed, query=[("b", "x y"), ("a", "2"), ("a", "1~!")])
    assert "?" in url and send(signed, url, headers).status_code == 200
    stream = b'{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "stream": "true"}'
    url, headers = sign(signed, body=stream)
    check_pangu_stream(send(signed, url, headers, stream), "pangu_v1")
    ten_minutes_ago = datetime.now(timezone.utc) - timedelta(minutes=10)
    assert send(signed, *sign(signed, date=ten_minutes_ago)).status_code == 200


def test_wrong_signature(signed: httpx.Client) -> None:
    url, headers = sign(signed)
    last = headers["Authorization"][-1]
    headers["Authorization"] = headers["Authorization"][:-1] + ("0" if last != "0" else "1")
    refused(send(signed, url, headers), "PANGU.0011", "Invalid credentials")
    url, headers = sign(signed)
    refused(send(signed, url, headers, BODY.replace(b"hi", b"ho")))  # the body is signed
    url, headers = sign(signed)
    refused(send(signed, url + "?extra=1", headers))  # so is the query
    url, headers = sign(signed, headers={"X-Project-Id": "proj-1"})
    refused(send(signed, url, {**headers, "X-Project-Id": "proj-2"}))  # and every signed header


@pytest.mark.parametrize("minutes", [-16, -60 * 24, 16], ids=["stale", "a-day-old", "future"])
def test_date_outside_the_window(signed: httpx.Client, minutes: int) -> None:
    date = datetime.now(timezone.utc) + timedelta(minutes=minutes)
    refused(send(signed, *sign(signed, date=date)), "PANGU.0011", "X-Sdk-Date")


def test_unknown_key(signed: httpx.Client) -> None:
    refused(send(signed, *sign(signed, ak="NOSUCHACCESSKEY00001")), "PANGU.0011", "Invalid credentials")


def resign(signed: httpx.Client, change: Any) -> dict[str, str]:
    url, headers = sign(signed)
    assert url == V1
    return change(headers) or headers


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        (lambda h: {**h, "Authorization": "SDK-HMAC-SHA256 garbage"}, "Malformed"),
        (lambda h: {**h, "Authorization": h["Authorization"].split(", Signature=")[0]}, "Malformed"),
        (lambda h: {**h, "Authorization": h["Authorization"].replace(", ", ",")}, "Malformed"),
        (lambda h: {**h, "Authorization": h["Authorization"].replace("SDK-HMAC-SHA256", "SDK-HMAC-SM3")}, "only"),
        (lambda h: {**h, "Authorization": h["Authorization"].replace("host;", "")}, "SignedHeaders"),
        (lambda h: {**h, "Authorization": h["Authorization"].replace(";x-sdk-date", "")}, "SignedHeaders"),
        (lambda h: {k: v for k, v in h.items() if k != "X-Sdk-Date"}, "exactly once"),
        (lambda h: {**h, "X-Sdk-Date": "2025-01-02T03:04:05Z"}, "X-Sdk-Date"),
    ],
    ids=["garbage", "no-signature", "no-spaces", "sm3", "host-unsigned", "date-unsigned", "no-date", "iso-date"],
)
def test_malformed_signatures(signed: httpx.Client, change: Any, fragment: str) -> None:
    refused(send(signed, V1, resign(signed, change)), "PANGU.0011", fragment)


def test_unsigned_payload_is_refused(signed: httpx.Client) -> None:
    url, headers = sign(signed, headers={"X-Sdk-Content-Sha256": "UNSIGNED-PAYLOAD"})
    refused(send(signed, url, headers), "PANGU.0011", "Unsigned payloads")


def test_body_cap_still_answers_413(signed: httpx.Client, settings: Any) -> None:
    big = b'{"messages": [{"role": "user", "content": "' + b"x" * (settings.max_request_length_mb << 20) + b'"}]}'
    url, headers = sign(signed, body=big)
    assert_pangu_error(send(signed, url, headers, big), "pangu_v1", 413, "PANGU.0010")


def test_secrets_never_reach_the_logs(signed: httpx.Client, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG):
        send(signed, *sign(signed))
        send(signed, *sign(signed, sk="wrong-sk-0b9d"))
        sdk_chat(sdk_client(str(signed.base_url), FILE_AK, FILE_SK))
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "playground.access" in {r.name for r in caplog.records}, "the access log did run"
    assert all(secret not in text for secret in SECRETS)


# ---- only AK/SK configured; the knob itself -----------------------------------------------------------------------


def test_aksk_alone_turns_v1_auth_on(settings: Any, service: Any) -> None:
    with extra_server(settings, service, pangu_aksk=[f"{AK}:{SK}"]) as http:
        refused(http.post(V1, content=BODY), "PANGU.0012")
        refused(http.post(V1, content=BODY, headers={"X-Auth-Token": "anything"}), "PANGU.0011")
        assert send(http, *sign(http)).status_code == 200
        assert sdk_chat(sdk_client(str(http.base_url), AK, SK)).choices
        # One credential closes every door (spec §1.2, issue 31): /v1 has no keys of its own, so it is closed.
        assert http.post("/v1/chat/completions", json={"model": "x", "messages": []}).status_code == 401


def test_flag_env_and_file_forms(keyfile: Path) -> None:
    from engine.cli import build_parser, settings_from

    s = settings_from(["--pangu-aksk", f"A1:s1, @{keyfile}"], environ={"PLAYGROUND_PANGU_AKSK": "ignored:x"})
    assert aksk.load_pairs(s.pangu_aksk) == {"A1": "s1", FILE_AK: FILE_SK}
    s = settings_from([], environ={"PLAYGROUND_PANGU_AKSK": "A1:s1,A2:s:2"})
    assert aksk.load_pairs(s.pangu_aksk) == {"A1": "s1", "A2": "s:2"}
    assert "PLAYGROUND_PANGU_AKSK" in build_parser().format_help()


@pytest.mark.parametrize(
    "entries",
    [
        ["no-colon-secret"],
        [":only-secret"],
        ["AK:"],
        ["A K:secret-x"],
        ["AK:secret-x", "AK:secret-y"],
        ["@/nonexistent/pairs.txt"],
    ],
)
def test_bad_pairs_stop_the_server_without_echoing_secrets(settings: Any, entries: list[str]) -> None:
    with pytest.raises(ValueError, match="--pangu-aksk") as info:
        PanguV1Auth(settings.replace(pangu_aksk=entries).http)
    for secret in ("no-colon-secret", "only-secret", "secret-x", "secret-y"):
        assert secret not in str(info.value)


def test_ui_login_takes_a_secret_key(settings: Any, keyfile: Path) -> None:
    check = ui_auth(settings.replace(pangu_aksk=[f"{AK}:{SK}", f"@{keyfile}"]).http)
    assert check is not None and check("me", SK) and check("me", FILE_SK)
    assert not check("me", AK) and not check("me", "wrong-sk-0b9d")


def test_verify_matches_the_sdk_signer_offline() -> None:
    """The canonical request rebuilt here equals the SDK's for a request with a query and a non-ASCII header."""
    from huaweicloudsdkcore.auth.credentials import BasicCredentials
    from huaweicloudsdkcore.sdk_request import SdkRequest
    from huaweicloudsdkcore.signer.signer import Signer

    now = datetime(2025, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    params = {"Content-Type": "application/json", "X-Sdk-Date": now.strftime(aksk.DATE_FORMAT), "X-Note": " é ü "}
    request = SdkRequest(
        method="POST",
        schema="http",
        host="127.0.0.1:1",
        resource_path="/v1/p q/deployments/d~/x",
        query_params=[("z", "1"), ("a", "b c"), ("a", "+")],
        header_params=params,
        body=BODY,
    )
    Signer(BasicCredentials(AK, SK)).sign(request)
    path, _, query = request.uri.partition("?")
    wire = [(k.lower(), v) for k, v in request.header_params.items()]  # values as Latin-1 text, as a server sees them
    assert aksk.verify({AK: SK}, "POST", unquote(path), query, wire, BODY, now=now) == AK
    with pytest.raises(AuthError):
        aksk.verify({AK: SK}, "POST", unquote(path), query, wire, BODY, now=now + timedelta(minutes=16))
