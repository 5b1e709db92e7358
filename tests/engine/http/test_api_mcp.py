"""`--mcp` (issue 21 point 5): the page's chat as an MCP tool, through Gradio's MCP server, driven by the `mcp` SDK's
own streamable-HTTP client against the real app on the session's loaded model."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import LiveServer, serving

LAYER = "api"  # what this module's own fixtures or bodies need (tests/conftest.py)

KEY = "mcp-test-key"


@pytest.fixture(scope="module")
def mcp_live(settings: Any, service: Any) -> Iterator[LiveServer]:
    with serving(settings.replace(mcp=True, ui=False), service) as server:
        yield server


@pytest.fixture(scope="module")
def mcp_keyed(settings: Any, service: Any) -> Iterator[LiveServer]:
    with serving(settings.replace(mcp=True, api_keys=[KEY]), service) as server:
        yield server


def mcp_session(url: str, calls: Any, headers: dict[str, str] | None = None) -> Any:
    """Run `calls(session)` in an initialised MCP client session on the server at `url`; returns its result."""
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    async def go() -> Any:
        async with (
            httpx.AsyncClient(headers=headers, timeout=120) as http,
            streamable_http_client(url + "/mcp/gradio_api/mcp/", http_client=http) as (read, write, _),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            return await calls(session)

    return asyncio.run(go())


def greedy_reply(live: LiveServer, message: str, max_tokens: int) -> str:
    body = {
        "model": live.service.served_name,
        "messages": [{"role": "user", "content": message}],
        "max_tokens": max_tokens,
        "temperature": 0,
    }
    with live.client() as http:
        return str(http.post("/v1/chat/completions", json=body).json()["choices"][0]["message"]["content"])


def test_tools_list_offers_the_chat_tool_alone(mcp_live: LiveServer) -> None:
    async def calls(session: Any) -> Any:
        return await session.list_tools()

    tools = mcp_session(mcp_live.url, calls).tools
    assert [t.name for t in tools] == ["chat"]  # the page's stateful endpoints are not tools
    schema = tools[0].inputSchema
    assert schema["required"] == ["message"]
    assert {"system", "max_tokens", "temperature", "top_p", "seed", "model"} <= set(schema["properties"])
    assert "request" not in schema["properties"]
    assert "one question" in tools[0].description


def test_tools_call_answers_as_the_api_does(mcp_live: LiveServer) -> None:
    async def calls(session: Any) -> Any:
        return await session.call_tool("chat", {"message": "Name a colour.", "max_tokens": 8, "temperature": 0})

    result = mcp_session(mcp_live.url, calls)
    assert not result.isError
    text = result.content[0].text
    assert text and text == greedy_reply(mcp_live, "Name a colour.", 8)  # the same engine, the same greedy reply
    metrics = httpx.get(mcp_live.url + "/metrics").text
    assert 'route="mcp:chat"' in metrics and 'entry="mcp"' in metrics  # the API's policy counted it


def test_a_bad_tool_call_is_the_apis_validation_error(mcp_live: LiveServer) -> None:
    async def calls(session: Any) -> Any:
        return await session.call_tool("chat", {"message": "Hi", "max_tokens": 4, "temperature": 9})

    result = mcp_session(mcp_live.url, calls)
    assert result.isError
    assert "temperature" in result.content[0].text  # the API's own message, not a crash
    assert httpx.get(mcp_live.url + "/health").status_code == 200


def test_unknown_model_is_model_not_found(mcp_live: LiveServer) -> None:
    async def calls(session: Any) -> Any:
        return await session.call_tool("chat", {"message": "Hi", "max_tokens": 4, "model": "no-such-model"})

    result = mcp_session(mcp_live.url, calls)
    assert result.isError and "Model not found" in result.content[0].text


def test_with_credentials_the_mcp_endpoint_needs_a_bearer_key(mcp_keyed: LiveServer) -> None:
    endpoint = mcp_keyed.url + "/mcp/gradio_api/mcp/"
    refused = httpx.post(endpoint, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    assert refused.status_code == 401 and refused.json()["error_type"] == "Unauthorized"
    wrong = httpx.post(endpoint, json={}, headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401
    assert httpx.get(mcp_keyed.url + "/mcp/gradio_api/info").status_code == 401  # the whole mount, not one route

    async def calls(session: Any) -> Any:
        return await session.call_tool("chat", {"message": "Say hi.", "max_tokens": 4, "temperature": 0})

    result = mcp_session(mcp_keyed.url, calls, headers={"Authorization": f"Bearer {KEY}"})
    assert not result.isError and result.content[0].text
    assert httpx.get(mcp_keyed.url + "/").status_code in (200, 401)  # the page keeps its own login


def test_mcp_is_off_by_default(live: LiveServer) -> None:
    listing = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    assert httpx.post(live.url + "/mcp/gradio_api/mcp/", json=listing).status_code == 404


def test_mcp_on_a_public_bind_needs_credentials(settings: Any) -> None:
    from engine.http.exposure import check_exposure

    with pytest.raises(SystemExit, match="--mcp"):
        check_exposure(settings.replace(mcp=True, host="0.0.0.0", insecure_public=True).http)
    check_exposure(settings.replace(mcp=True, host="0.0.0.0", api_keys=["k"]).http)  # with a key it may
    check_exposure(settings.replace(mcp=True, host="127.0.0.1").http)
