"""`GET /server/state` and `POST /reset_prefix_cache` (issue 19): the engine's live numbers (KV pages, prefix cache,
running and queued requests), the same numbers in /metrics, the reset done by the engine thread between steps, and
who may call either route."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from engine.core.prefix_cache import BLOCK
from tests.conftest import chat, extra_server
from tests.ops_helpers import LongStream, served, small_service, wait_for

LAYER = "api"  # what this module's own fixtures or bodies need (tests/conftest.py)

# A prompt of several prefix-cache blocks, so a second send of it is served from the cache.
LONG = [
    {
        "role": "user",
        "content": "Name the planets of the solar system in order from the sun, with one fact "
        "about each of them, and say which one has the most moons and why.",
    }
]


def state(http: httpx.Client, **headers: str) -> dict[str, Any]:
    r = http.get("/server/state", headers=headers)
    assert r.status_code == 200, r.text
    return r.json()


def idle(http: httpx.Client) -> dict[str, Any]:
    wait_for(lambda: state(http)["requests"]["running"] == 0, 30, "an idle engine")
    return state(http)


def gauges(http: httpx.Client, **headers: str) -> dict[str, float]:
    r = http.get("/metrics", headers=headers)
    assert r.status_code == 200
    return {s.name: s.value for f in text_string_to_metric_families(r.text) for s in f.samples if not s.labels}


def test_state_counts_the_prefix_cache_and_the_reset_empties_it(http: httpx.Client) -> None:
    r = http.post("/reset_prefix_cache")
    assert r.status_code == 200 and r.json()["reset"] is True
    s0 = idle(http)
    p0 = s0["prefix_cache"]
    assert p0["enabled"] and p0["blocks"] == 0 and p0["capacity_blocks"] > 0 and p0["block_tokens"] == BLOCK
    kv = s0["kv_cache"]
    assert kv["pages_used"] == 0 and kv["pages_total"] > 0 and kv["tokens_used"] == 0 and kv["tokens_capacity"] > 0
    assert s0["model_loaded"] and s0["requests"] == {"running": 0, "waiting": 0, "running_seqs": 0, "in_flight": 0}

    first = chat(http, messages=LONG, max_tokens=2, temperature=0)
    assert first.status_code == 200
    prompt = first.json()["usage"]["prompt_tokens"]
    assert prompt > 3 * BLOCK
    p1 = idle(http)["prefix_cache"]
    assert p1["blocks"] >= prompt // BLOCK  # the prompt's whole blocks were kept
    assert p1["lookups"] == p0["lookups"] + 1 and p1["query_tokens"] == p0["query_tokens"] + prompt
    assert p1["hit_tokens"] == p0["hit_tokens"] and p1["hit_lookups"] == p0["hit_lookups"]  # nothing to reuse

    assert chat(http, messages=LONG, max_tokens=2, temperature=0).status_code == 200  # the same prompt again
    p2 = idle(http)["prefix_cache"]
    assert (
        p2["hit_tokens"] - p1["hit_tokens"] == (prompt - 1) // BLOCK * BLOCK
    )  # every whole block but the last token's
    assert p2["hit_lookups"] == p1["hit_lookups"] + 1 and p2["hit_rate"] > p1["hit_rate"]
    assert p2["hit_rate"] == pytest.approx(p2["hit_tokens"] / p2["query_tokens"])

    m = gauges(http)
    assert m["playground_prefix_cache_blocks"] == p2["blocks"]
    assert m["playground_prefix_cache_capacity_blocks"] == p2["capacity_blocks"]
    assert m["playground_prefix_cache_hit_tokens_total"] == p2["hit_tokens"]
    assert m["playground_prefix_cache_query_tokens_total"] == p2["query_tokens"]
    assert m["playground_prefix_cache_lookups_total"] == p2["lookups"]
    assert m["playground_prefix_cache_hit_lookups_total"] == p2["hit_lookups"]
    assert m["playground_kv_cache_used_pages"] == 0 and m["playground_kv_cache_total_pages"] == kv["pages_total"]

    r = http.post("/reset_prefix_cache")
    assert r.status_code == 200 and r.json() == {"reset": True, "blocks_dropped": p2["blocks"]}
    p3 = state(http)["prefix_cache"]
    assert p3["blocks"] == 0 and p3["resets"] == p2["resets"] + 1
    assert p3["hit_tokens"] == p2["hit_tokens"]  # counters only grow (Prometheus counters)
    assert gauges(http)["playground_prefix_cache_blocks"] == 0
    assert chat(http, messages=LONG, max_tokens=2, temperature=0).status_code == 200
    assert idle(http)["prefix_cache"]["hit_tokens"] == p2["hit_tokens"]  # emptied: the third send found nothing


def test_a_reset_while_a_reply_streams_leaves_the_reply_whole(http: httpx.Client, live: Any) -> None:
    stream = LongStream(live.url, messages=LONG, max_tokens=60).start()
    try:
        stream.wait_started()
        running = state(http)
        assert running["requests"]["running"] == 1 and running["requests"]["in_flight"] == 1
        assert running["kv_cache"]["pages_used"] > 0 and running["kv_cache"]["tokens_used"] > 0
        assert http.post("/reset_prefix_cache").status_code == 200  # between two of the stream's steps
        stream.join()
    finally:
        stream.close()
    assert stream.status == 200 and "data: [DONE]" in stream.lines
    assert any('"finish_reason":"length"' in line for line in stream.lines), stream.lines[-4:]  # all 60 tokens
    assert idle(http)["prefix_cache"]["blocks"] > 0  # the finished reply was offered to the emptied cache


def test_running_and_queued_requests(settings: Any, service: Any) -> None:
    with small_service(service, settings, max_num_seqs=1) as small, served(settings, small, ui=False) as (http, _):
        streams = [LongStream(str(http.base_url), max_tokens=300) for _ in range(2)]
        try:
            streams[0].start().wait_started()
            streams[1].start()
            wait_for(lambda: state(http)["requests"]["waiting"] == 1, 30, "a queued request")
            s = state(http)
            assert s["requests"] == {"running": 1, "waiting": 1, "running_seqs": 1, "in_flight": 2}
            assert s["prefix_cache"] == {"enabled": False}  # this engine has none: the reset has nothing to do
            assert http.post("/reset_prefix_cache").json() == {"reset": False, "blocks_dropped": 0}
            m = gauges(http)
            assert m["playground_running_requests"] == 1 and m["playground_queue_depth"] == 1
            assert m["playground_kv_cache_used_pages"] == s["kv_cache"]["pages_used"] > 0
        finally:
            for st in streams:
                st.close()
        wait_for(
            lambda: state(http)["requests"] == {"running": 0, "waiting": 0, "running_seqs": 0, "in_flight": 0},
            30,
            "both requests to end",
        )
        assert state(http)["kv_cache"]["pages_used"] == 0


def test_state_while_loading_is_a_503(settings: Any) -> None:
    with extra_server(settings, None, ui=False) as http:
        assert http.get("/server/state").status_code == 503
        assert http.post("/reset_prefix_cache").status_code == 503


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def test_with_api_and_admin_keys_only_an_admin_resets(settings: Any, service: Any) -> None:
    with extra_server(settings, service, ui=False, api_keys=["user"], admin_keys=["root"]) as http:
        assert http.get("/server/state").status_code == 401
        assert http.get("/server/state", headers=bearer("nope")).status_code == 401
        assert state(http, **bearer("user"))["model_loaded"] and state(http, **bearer("root"))["model_loaded"]
        missing = http.post("/reset_prefix_cache")
        assert missing.status_code == 401 and missing.json()["error_type"] == "Unauthorized"
        assert http.post("/reset_prefix_cache", headers=bearer("nope")).status_code == 401
        user = http.post("/reset_prefix_cache", headers=bearer("user"))
        assert user.status_code == 403 and "admin key" in user.json()["error"]
        assert http.post("/reset_prefix_cache", headers=bearer("root")).status_code == 200
        assert "playground_prefix_cache_blocks" in gauges(http, **bearer("user"))
        assert http.get("/metrics").status_code == 401


def test_with_api_keys_and_no_admin_key_nobody_resets(settings: Any, service: Any) -> None:
    with extra_server(settings, service, ui=False, api_keys=["user"]) as http:
        assert http.post("/reset_prefix_cache").status_code == 401
        assert http.post("/reset_prefix_cache", headers=bearer("user")).status_code == 403
    with extra_server(settings, service, ui=False, pangu_auth_tokens=["t"]) as http:  # credentials, none Bearer
        assert http.get("/server/state").status_code == 401  # one credential closes every door (issue 31)
        r = http.post("/reset_prefix_cache", headers={"X-Auth-Token": "t"})
        assert r.status_code == 403 and "has none" in r.json()["error"]


def test_admin_keys_alone_guard_only_the_reset(settings: Any, service: Any) -> None:
    with extra_server(settings, service, ui=False, admin_keys=["root"]) as http:
        assert state(http)["model_loaded"]  # no --api-keys: reads are open, as /metrics and /v1 are
        assert chat(http, max_tokens=1).status_code == 200
        assert http.post("/reset_prefix_cache").status_code == 401
        assert http.post("/reset_prefix_cache", headers=bearer("root")).json()["reset"] is True


def test_reset_is_post_only(http: httpx.Client) -> None:
    assert http.get("/reset_prefix_cache").status_code == 405
    assert http.post("/server/state").status_code == 405
