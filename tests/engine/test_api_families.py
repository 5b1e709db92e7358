"""Phi-3 and GLM-4 shapes end to end through the API: tiny random checkpoints (tests/family_fixture.py) served by
the real app, whose engine runs them on the HF-forward runner with its decode rows batched.

One live server per family for this module. Each reply is short (a random model has nothing to say); what is
checked is the serving: streams equal their non-stream answer, n > 1 and concurrent requests batch and reproduce,
logprobs agree with the chosen tokens, and a JSON schema constrains the output.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from engine.core.hf_runner import HFRunner
from tests.api_helpers import entries, ok, text_of
from tests.conftest import LiveServer, built_and_served, sse_events
from tests.family_fixture import PHI3_WINDOW, build_family

LAYER = "api"  # what this module's own fixtures or bodies need (tests/conftest.py)

FAMILIES = ["phi3", "glm4"]
SCHEMA = {
    "type": "object",
    "properties": {"pet": {"enum": ["cat", "dog"]}, "legs": {"type": "integer", "maximum": 9}},
    "required": ["pet", "legs"],
    "additionalProperties": False,
}
PROMPTS = ["hi", "Tell me about cats.", "What is 2+2? Answer briefly please.", "A"]


@pytest.fixture(scope="module", params=FAMILIES)
def family(request: pytest.FixtureRequest, settings: Any) -> Iterator[tuple[str, LiveServer]]:
    name = request.param
    for server in built_and_served(settings.replace(model=str(build_family(name)), served_model_name=f"tiny-{name}")):
        yield name, server


def post(server: LiveServer, name: str, **body: Any) -> Any:
    body.setdefault("messages", [{"role": "user", "content": "hi"}])
    with server.client() as http:
        return http.post("/v1/chat/completions", json={"model": f"tiny-{name}", **body})


def test_served_by_the_batched_hf_runner(family: tuple[str, LiveServer]) -> None:
    name, server = family
    runner = server.service.engine.runner
    assert isinstance(runner, HFRunner) and runner.batched
    assert runner.model.config.model_type == name


def test_greedy_stream_equals_non_stream_with_consistent_logprobs(family: tuple[str, LiveServer]) -> None:
    name, server = family
    fields = {"temperature": 0, "max_tokens": PHI3_WINDOW, "ignore_eos": True, "logprobs": True, "top_logprobs": 3}
    body = ok(post(server, name, **fields))  # the prompt plus the reply cross Phi-3's sliding window
    es = entries(body)
    assert len(es) == body["usage"]["completion_tokens"] == PHI3_WINDOW
    for e in es:
        assert e["top_logprobs"][0]["token"] == e["token"] and e["logprob"] <= 0
        assert e["top_logprobs"][0]["logprob"] == pytest.approx(e["logprob"])
    r = post(server, name, stream=True, **fields)
    assert r.status_code == 200, r.text
    events = sse_events(r.text)
    assert events[-1] == "[DONE]"
    chunks = [e for e in events[:-1] if e["choices"]]
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks) == text_of(body)
    streamed = [t for c in chunks if c["choices"][0].get("logprobs") for t in c["choices"][0]["logprobs"]["content"]]
    assert [t["token"] for t in streamed] == [e["token"] for e in es]


def test_n_choices_run_in_one_batch_and_reproduce_with_a_seed(family: tuple[str, LiveServer]) -> None:
    name, server = family
    fields = {"n": 3, "temperature": 1.0, "seed": 11, "max_tokens": 8, "ignore_eos": True, "logprobs": True}
    first, again = ok(post(server, name, **fields)), ok(post(server, name, **fields))
    assert len(first["choices"]) == 3
    assert [text_of(first, i) for i in range(3)] == [text_of(again, i) for i in range(3)]
    assert all(len(entries(first, i)) == 8 for i in range(3))
    assert 3 in first["usage"]["batch_size"]  # the three candidates decoded in the same steps


def test_concurrent_requests_get_their_solo_replies(family: tuple[str, LiveServer]) -> None:
    name, server = family

    def ask(prompt: str) -> dict[str, Any]:
        return ok(
            post(
                server,
                name,
                messages=[{"role": "user", "content": prompt}],
                temperature=0,
                max_tokens=24,
                ignore_eos=True,
            )
        )

    solo = [text_of(ask(p)) for p in PROMPTS]
    with ThreadPoolExecutor(len(PROMPTS)) as pool:
        together = list(pool.map(ask, PROMPTS))
    assert [text_of(b) for b in together] == solo  # ragged prompts, joining and leaving the batch as they come
    assert max(s for b in together for s in b["usage"]["batch_size"]) > 1


def test_json_schema_constrains_the_reply(family: tuple[str, LiveServer]) -> None:
    name, server = family
    fmt = {"type": "json_schema", "json_schema": {"name": "pet", "schema": SCHEMA}}
    body = ok(post(server, name, temperature=0, max_tokens=80, response_format=fmt))
    assert body["choices"][0]["finish_reason"] == "stop"
    value = json.loads(text_of(body))
    assert value["pet"] in ("cat", "dog") and isinstance(value["legs"], int) and set(value) == {"pet", "legs"}
    r = post(server, name, temperature=0, max_tokens=80, response_format=fmt, stream=True)
    chunks = [e for e in sse_events(r.text)[:-1] if e["choices"]]
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks) == text_of(body)
