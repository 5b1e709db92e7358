"""The Pangu V2 and V1 routes against the live server: the same requests and service as /v1, differing only where
spec §1.1, §2.5, §2.6, §4.3, §5.3 and §6.3 say. Conformance cases 6-8, 12, 15, 18, 22, 28, 44, 57-63, 101-102, 104.

V2 is driven with the openai SDK (it is OpenAI-shaped), V1 with httpx and its own headers and raw chunks.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.api_helpers import ok, text_of
from tests.conftest import MODEL, chat, extra_server
from tests.ops_helpers import LongStream, small_service, wait_for
from tests.pangu_helpers import (
    PANGU_ID_RE,
    V1,
    V2,
    assert_pangu_error,
    body,
    check_pangu_stream,
    post,
    raw_events,
)

LAYER = "api"  # what this module's own fixtures or bodies need (tests/conftest.py)

HI = [{"role": "user", "content": "hi"}]
GREEDY = {"temperature": 0, "max_tokens": 12}
PANGU_GREEDY = {"top_k": 1, "max_tokens": 12}  # Pangu strict refuses temperature 0; top_k 1 is greedy too


@pytest.fixture(scope="module")
def v2(live: Any) -> Any:
    import openai

    return openai.OpenAI(base_url=live.url + "/api/v2", api_key="unused", timeout=120, max_retries=0)


@pytest.fixture(scope="module")
def greedy_text(live: Any) -> str:
    with live.client() as http:
        return text_of(ok(chat(http, **GREEDY)))


# ---- V2 through the openai SDK (cases 6, 102) ------------------------------------------------------------------


def test_v2_sdk_non_stream(v2: Any, greedy_text: str) -> None:  # case 6
    resp = v2.chat.completions.create(model=MODEL, messages=HI, **{"max_tokens": 12}, extra_body={"top_k": 1})
    assert PANGU_ID_RE.match(resp.id) and resp.object == "chat.completion" and resp.model == MODEL
    assert resp.choices[0].message.content == greedy_text  # one service: the same tokens as /v1
    assert resp.choices[0].model_extra["stop_reason"] is None
    assert resp.model_extra["prompt_logprobs"] is None
    assert "prefill_time" not in resp.model_extra and "decode_time_arr" not in resp.model_extra
    assert "batch_size" not in resp.usage.model_extra
    assert resp.usage.total_tokens == resp.usage.prompt_tokens + resp.usage.completion_tokens


def test_v2_sdk_stream(v2: Any, greedy_text: str) -> None:  # case 102
    stream = v2.chat.completions.create(model=MODEL, messages=HI, stream=True, max_tokens=12, extra_body={"top_k": 1})
    with stream:
        chunks = list(stream)
    assert len({c.id for c in chunks}) == 1 and PANGU_ID_RE.match(chunks[0].id)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert all(c.usage is not None for c in chunks), "usage in every chunk"
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == greedy_text
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == chunks[-2].usage.completion_tokens


def test_v2_sdk_errors_carry_pangu_codes(v2: Any) -> None:
    import openai

    with pytest.raises(openai.BadRequestError) as info:
        v2.chat.completions.create(model=MODEL, messages=HI, temperature=1.5)
    assert info.value.status_code == 400 and info.value.code == "PANGU.0010"
    assert "(0, 1]" in info.value.message


# ---- V1 through httpx (cases 7, 8, 22, 63, 101) ----------------------------------------------------------------


def test_v1_non_stream_without_model_and_role(http: httpx.Client, greedy_text: str) -> None:  # cases 7, 22, 63
    r = http.post(V1, json={"messages": [{"content": "hi"}], **PANGU_GREEDY})
    data = ok(r)
    assert PANGU_ID_RE.match(data["id"]) and r.headers["x-request-id"] == data["id"]
    assert data["model"] == MODEL
    choice = data["choices"][0]
    assert "delta" not in choice and choice["message"]["content"] == greedy_text
    assert "prefill_time" not in data and "batch_size" not in data["usage"]


def test_v1_model_field_is_ignored(http: httpx.Client) -> None:
    assert post(http, "pangu_v1", model="anything", max_tokens=2).status_code == 200


@pytest.mark.parametrize("route", ["pangu_v1", "pangu_v2"])
@pytest.mark.parametrize("stream", [True, "true", "TRUE"])
def test_raw_stream_sequence(http: httpx.Client, greedy_text: str, route: str, stream: Any) -> None:  # 44, 101, 102
    s = check_pangu_stream(post(http, route, stream=stream, **PANGU_GREEDY), route)
    assert s["text"] == greedy_text
    assert s["events"] == []  # the event: usage line is off by default
    assert s["closing"]["finish_reason"] in ("stop", "length")


def test_stream_false_string_is_non_stream(http: httpx.Client) -> None:
    r = post(http, "pangu_v2", stream="false", max_tokens=2)
    assert r.headers["content-type"].startswith("application/json") and ok(r)["object"] == "chat.completion"


def test_v1_usage_event_line(settings: Any, service: Any) -> None:  # §5.3 step 5
    with extra_server(settings, service, ui=False, pangu_v1_usage_event=True) as http:
        r = post(http, "pangu_v1", stream=True, max_tokens=3, ignore_eos=True)
        s = check_pangu_stream(r, "pangu_v1")
        (event,) = s["events"]
        usage = s["usage"]
        assert event == {
            "usage": {
                "completionTokens": 3,
                "promptTokens": usage["prompt_tokens"],
                "totalTokens": usage["total_tokens"],
            },
            "tokens": usage["prompt_tokens"],
            "token_number": 3,
        }
        assert r.text.index("event:") > r.text.index('"choices":[]'), "after the usage chunk, before the terminator"
        v2_chunks, v2_events = raw_events(post(http, "pangu_v2", stream=True, max_tokens=3), "pangu_v2")
        assert v2_events == [], "V1 only"


# ---- Pangu error bodies and codes (§6.1, §6.3; cases 15, 18, 28, 60) ---------------------------------------------


@pytest.mark.parametrize("route", ["pangu_v1", "pangu_v2"])
@pytest.mark.parametrize(
    ("case", "raw", "code"),
    [
        ("not-json", b"not json", "PANGU.0010"),
        ("array", b"[]", "PANGU.0010"),
        ("invalid-utf8", b'{"messages": [{"role": "user", "content": "h\xff"}]}', "PANGU.0010"),
        ("messages-missing", b'{"model": "' + MODEL.encode() + b'"}', "PANGU.3278"),
        ("messages-empty", b'{"model": "' + MODEL.encode() + b'", "messages": []}', "PANGU.0010"),
    ],
)
def test_bad_bodies(http: httpx.Client, route: str, case: str, raw: bytes, code: str) -> None:
    path = V1 if route == "pangu_v1" else V2
    assert_pangu_error(http.post(path, content=raw), route, 400, code)


def test_v2_model_rules(http: httpx.Client) -> None:  # cases 28, 60
    assert_pangu_error(post(http, "pangu_v2", model=None), "pangu_v2", 400, "PANGU.3278", "model")
    assert_pangu_error(post(http, "pangu_v2", model="nope"), "pangu_v2", 400, "PANGU.0010", "Model not found")
    assert_pangu_error(post(http, "pangu_v2", messages=[{"content": "hi"}]), "pangu_v2", 400, "PANGU.3278", "role")


def test_v1_error_details_carry_the_engine_error(http: httpx.Client) -> None:  # case 63
    r = post(http, "pangu_v1", temperature=1.5)
    assert_pangu_error(r, "pangu_v1", 400, "PANGU.0010", "Parameter temperature must be in (0, 1], got 1.5.")
    assert r.json()["details"][0]["error_type"] == "Input Validation Error"
    assert r.json()["error_msg"] == "parameter illegal."


@pytest.mark.parametrize("route", ["pangu_v1", "pangu_v2"])
def test_body_over_limit_is_413(http: httpx.Client, settings: Any, route: str) -> None:
    big = json.dumps(body(route, messages=[{"role": "user", "content": "a" * (settings.max_request_length_mb << 20)}]))
    path = V1 if route == "pangu_v1" else V2
    assert_pangu_error(http.post(path, content=big.encode()), route, 413, "PANGU.0010")


def test_v2_error_id_is_fresh_and_is_the_request_id(http: httpx.Client) -> None:
    a, b = post(http, "pangu_v2", n=0), post(http, "pangu_v2", n=0)
    assert a.json()["id"] != b.json()["id"]
    assert a.headers["x-request-id"] == a.json()["id"]


@pytest.mark.parametrize(
    ("method", "path", "route", "status", "code"),
    [
        ("POST", "/api/v2/chat/completion", "pangu_v2", 404, "PANGU.3254"),
        ("POST", "/api/v2/chat/completions/", "pangu_v2", 404, "PANGU.3254"),
        ("GET", "/api/v2/models", "pangu_v2", 404, "PANGU.3254"),
        ("GET", "/api/v2/chat/completions", "pangu_v2", 405, "PANGU.3254"),
        ("POST", "/v1/p/deployments/d/chat/completion", "pangu_v1", 404, "PANGU.3254"),
        ("POST", "/v1/p/deployments/d", "pangu_v1", 404, "PANGU.3254"),
        ("POST", "/v1/p.x/deployments/d/chat/completions", "pangu_v1", 404, "PANGU.3254"),  # bad segment
        ("POST", "/v1/p/deployments/" + "d" * 129 + "/chat/completions", "pangu_v1", 404, "PANGU.3254"),
        ("GET", V1, "pangu_v1", 405, "PANGU.3254"),
    ],
)
def test_unknown_paths_get_the_body_of_their_family(
    http: httpx.Client, method: str, path: str, route: str, status: int, code: str
) -> None:
    r = http.request(method, path, json=body(route) if method == "POST" else None)
    assert_pangu_error(r, route, status, code)
    if status == 405:
        assert r.headers["allow"] == "POST"


def test_deployment_mismatch_is_3254(settings: Any, service: Any) -> None:  # case 12
    with extra_server(settings, service, ui=False, pangu_project_id="proj-1", pangu_deployment_id="dep1") as http:
        assert post(http, "pangu_v1", max_tokens=1).status_code == 404  # V1 = /v1/proj-1/deployments/dep_1/...
        r = http.post("/v1/proj-1/deployments/dep1/chat/completions", json=body("pangu_v1", max_tokens=1))
        assert r.status_code == 200, r.text
        r = http.post("/v1/proj-2/deployments/dep1/chat/completions", json=body("pangu_v1", max_tokens=1))
        assert_pangu_error(r, "pangu_v1", 404, "PANGU.3254")


# ---- strict limits on and off (§2.5, cases 57-59) -------------------------------------------------------------

MANY = [{"role": "user", "content": "hi"}] * 21
IMAGE = [{"role": "user", "content": [{"type": "image_url", "image_url": "data:image/png;base64,iVBORw0KGgo="}]}]
STRICT_ONLY: list[tuple[str, dict[str, Any], str]] = [
    ("21-messages", {"messages": MANY}, "messages"),  # case 57
    ("temperature-0", {"temperature": 0}, "temperature"),  # case 58
    ("temperature-1.5", {"temperature": 1.5}, "(0, 1]"),
    ("top_p-tiny", {"top_p": 1e-7}, "top_p"),  # /v1's (1e-6, 1] refuses it too
    ("stop-empty-list", {"stop": []}, "stop"),
    ("max_tokens-over-model", {"max_tokens": 10**9}, "model maximum"),
    ("tool-role-without-tools", {"messages": [{"role": "tool", "content": "x", "tool_call_id": "c"}]}, "tool"),
]


@pytest.mark.parametrize("route", ["pangu_v1", "pangu_v2"])
@pytest.mark.parametrize(("case", "fields", "fragment"), STRICT_ONLY, ids=[c[0] for c in STRICT_ONLY])
def test_strict_limits(http: httpx.Client, route: str, case: str, fields: dict[str, Any], fragment: str) -> None:
    assert_pangu_error(post(http, route, **fields), route, 400, "PANGU.0010", fragment)


def test_media_is_refused_on_pangu(http: httpx.Client) -> None:
    assert_pangu_error(post(http, "pangu_v2", messages=IMAGE), "pangu_v2", 400, "PANGU.0010", "content[0]")


@pytest.mark.parametrize("route", ["pangu_v1", "pangu_v2"])
def test_n_codes(http: httpx.Client, route: str) -> None:  # case 59
    assert_pangu_error(post(http, route, stream=True, n=2), route, 400, "PANGU.3321")
    assert_pangu_error(post(http, route, n=3, max_tokens=2), route, 400, "PANGU.3320")
    data = ok(post(http, route, n=2, temperature=0.8, max_tokens=2))
    assert [c["index"] for c in data["choices"]] == [0, 1]


def test_v1_route_accepts_what_pangu_narrows(http: httpx.Client) -> None:  # case 58, last part
    assert chat(http, temperature=1.5, max_tokens=2).status_code == 200
    assert chat(http, messages=MANY, max_tokens=1).status_code == 200


@pytest.fixture(scope="module")
def lenient(settings: Any, service: Any) -> Iterator[httpx.Client]:
    with extra_server(settings, service, ui=False, pangu_strict_limits=False) as http:
        yield http


@pytest.mark.parametrize("route", ["pangu_v1", "pangu_v2"])
@pytest.mark.parametrize(
    ("case", "fields"),
    [(c, f) for c, f, _ in STRICT_ONLY if c not in ("top_p-tiny", "temperature-0")]
    + [("temperature-0", {"temperature": 0}), ("n-3", {"n": 3, "temperature": 0.8})],
)
def test_strict_limits_off_validates_like_v1(lenient: httpx.Client, route: str, case: str, fields: dict) -> None:
    r = post(lenient, route, **{"max_tokens": 2, **fields})
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("route", ["pangu_v1", "pangu_v2"])
def test_strict_limits_off_still_pangu_bodies_and_stream_n(lenient: httpx.Client, route: str) -> None:
    assert_pangu_error(post(lenient, route, stream=True, n=2), route, 400, "PANGU.3321")  # whatever strict says
    assert_pangu_error(post(lenient, route, temperature=2.5), route, 400, "PANGU.0010", "[0.0, 2.0]")  # /v1 range


# ---- moderation_config and enable_search without a hook (§2.6, cases 61, 62) -----------------------------------

MODERATION = {
    "black_glossary_names": ["a"],
    "white_glossary_names": [],
    "question_moderation": True,
    "answer_moderation": False,
    "show_result": True,
}


@pytest.mark.parametrize("route", ["pangu_v1", "pangu_v2", "v1"])
def test_moderation_config_without_hook_changes_nothing(http: httpx.Client, route: str) -> None:  # case 61
    plain = ok(post(http, route, **PANGU_GREEDY))
    moderated = ok(post(http, route, moderation_config=MODERATION, **PANGU_GREEDY))
    assert text_of(moderated) == text_of(plain)
    assert moderated["choices"][0]["finish_reason"] == plain["choices"][0]["finish_reason"] != "content_filter"
    assert "moderation_result" not in moderated


@pytest.mark.parametrize(
    ("fields", "fragment"),
    [
        ({"moderation_config": {"question_moderation": "yes"}}, "question_moderation"),
        ({"moderation_config": {"black_glossary_names": "a"}}, "black_glossary_names"),
        ({"moderation_config": {"white_glossary_names": [1]}}, "white_glossary_names"),
        ({"moderation_config": []}, "moderation_config"),
        ({"enable_search": "true"}, "enable_search"),
    ],
)
def test_pangu_fields_are_validated(http: httpx.Client, fields: dict[str, Any], fragment: str) -> None:
    assert_pangu_error(post(http, "pangu_v2", **fields), "pangu_v2", 400, "PANGU.0010", fragment)


class _Outbound:
    """Records connections to anything but loopback made by this process (the server runs in it)."""

    def __init__(self) -> None:
        self.on = False
        self.seen: list[Any] = []

    def __call__(self, event: str, args: tuple[Any, ...]) -> None:
        if self.on and event in ("socket.connect", "socket.getaddrinfo"):
            target = args[1] if event == "socket.connect" else args
            host = str(target[0]) if isinstance(target, tuple) and target else str(target)
            if host not in ("127.0.0.1", "localhost", "::1") and not host.startswith("/"):
                self.seen.append((event, host))


_OUTBOUND = _Outbound()
sys.addaudithook(_OUTBOUND)  # audit hooks cannot be removed; this one does nothing unless switched on


@pytest.mark.parametrize("route", ["pangu_v1", "pangu_v2", "v1"])
def test_enable_search_is_ignored_without_network(http: httpx.Client, route: str) -> None:  # case 62
    _OUTBOUND.seen.clear()
    _OUTBOUND.on = True
    try:
        r = post(http, route, enable_search=True, max_tokens=2)
    finally:
        _OUTBOUND.on = False
    assert r.status_code == 200, r.text
    assert r.headers["x-playground-ignored"] == "enable_search"
    assert _OUTBOUND.seen == []
    assert "x-playground-ignored" not in post(http, route, max_tokens=1).headers
    socket.getaddrinfo  # noqa: B018  (the module the hook watches)


# ---- queue full (case 104) -----------------------------------------------------------------------------------


def test_queue_full_is_503_on_v1_and_429_on_pangu(settings: Any, service: Any) -> None:  # case 104
    """An engine with one slot and max_queue 2: one stream running, one request waiting, then the extra ones."""
    with (
        small_service(service, settings, max_num_seqs=1, max_queue=2) as small,
        extra_server(settings, small, ui=False) as http,
    ):
        running = LongStream(str(http.base_url)).start()
        running.wait_started()
        waiting = threading.Thread(target=lambda: chat(http, max_tokens=1), daemon=True)
        waiting.start()
        wait_for(lambda: small.engine.load()["waiting"] == 1, what="a request waiting in the queue")
        try:
            r = chat(http, max_tokens=1)
            assert r.status_code == 503 and r.json()["error_type"] == "Service Unavailable", r.text
            assert "queue" in r.json()["error"]
            for route in ("pangu_v1", "pangu_v2"):
                assert_pangu_error(post(http, route, max_tokens=1), route, 429, "PANGU.3267")
        finally:
            running.close()
            waiting.join(timeout=60)
        assert not waiting.is_alive()
