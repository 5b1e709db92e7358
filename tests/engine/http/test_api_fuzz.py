"""Property-based fuzzing of the request body on all three routes (hypothesis; ~200 examples here, thousands with
bench/fuzz_api.py): never a 5xx, always the route family's status and body shape, and afterwards the server is
healthy, idle and still answers a normal request exactly as before. [SEC]

The fuzzed server caps generation at 4 tokens (`max_new_tokens`) so each example stays cheap on a CPU.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings

from tests.api_helpers import ok
from tests.conftest import MODEL, extra_server
from tests.fuzz_bodies import ROUTES, problems, requests
from tests.ops_helpers import wait_for

LAYER = "api"  # what this module's own fixtures or bodies need (tests/conftest.py)

EXAMPLES = 200
SEEN: Counter[tuple[str, int]] = Counter()
REFERENCE = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "temperature": 0, "max_tokens": 4}


@pytest.fixture(scope="module")
def fuzzed(settings: Any, service: Any) -> Iterator[httpx.Client]:
    """The session's engine behind a service whose caps keep every example cheap (at most 4 tokens, n <= 4)."""
    from engine.serving.service import ChatService

    capped = settings.replace(max_new_tokens=4, max_n=4)
    small = ChatService(service.engine, service.tokenizer, service.model, capped)
    with extra_server(capped, small, ui=False) as http:
        yield http


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(request=requests)
def test_fuzzed_bodies_never_hurt_the_server(fuzzed: httpx.Client, request: tuple[str, bytes]) -> None:
    route, raw = request
    r = fuzzed.post(ROUTES[route], content=raw, timeout=60)
    SEEN[(route, r.status_code)] += 1
    assert not problems(route, r.status_code, r.headers.get("content-type", ""), r.text), r.text


def test_server_is_healthy_and_correct_after_fuzzing(fuzzed: httpx.Client, service: Any, live: Any) -> None:
    """Runs after the fuzz test (file order): health, an idle engine, and the same greedy answer as a server that
    was never fuzzed."""
    assert sum(SEEN.values()) >= EXAMPLES, SEEN
    assert fuzzed.get("/health").status_code == 200
    wait_for(lambda: service.engine.load()["running"] == service.engine.load()["waiting"] == 0, 30, "an idle engine")
    with live.client() as fresh:
        expected = ok(fresh.post("/v1/chat/completions", json=REFERENCE))
    got = ok(fuzzed.post("/v1/chat/completions", json=REFERENCE))
    assert got["choices"][0]["message"]["content"] == expected["choices"][0]["message"]["content"]
    assert got["usage"]["completion_tokens"] == expected["usage"]["completion_tokens"]
    print("fuzz statuses:", dict(sorted(SEEN.items())))


@pytest.mark.parametrize("route", sorted(ROUTES))
@pytest.mark.parametrize(
    "raw",
    [
        b'{"model": "SmolLM2-135M-Instruct", "messages": [{"role": "user", "content": "\\ud800"}]}',
        b'{"model": "SmolLM2-135M-Instruct", "messages": [{"role": "user", "content": "hi"}], "stop": ["\\udfff"]}',
    ],
    ids=["content", "stop"],
)
def test_lone_surrogate_escape_is_a_validation_error(fuzzed: httpx.Client, route: str, raw: bytes) -> None:
    """Found by the fuzzer: valid JSON, but no text; the tokenizer raised on it (a 500) before the fix."""
    r = fuzzed.post(ROUTES[route], content=raw)
    assert not problems(route, r.status_code, r.headers["content-type"], r.text)
    assert r.status_code != 200 and "surrogate" in r.text


def test_surrogate_pairs_are_fine(fuzzed: httpx.Client) -> None:
    raw = b'{"model": "SmolLM2-135M-Instruct", "messages": [{"role": "user", "content": "\\ud83d\\ude00"}]}'
    assert fuzzed.post(ROUTES["v1"], content=raw).status_code == 200
