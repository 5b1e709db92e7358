"""Issue 31, item 7: a non-admin key loaded (and so evicted) models through MCP and the page's replay, where the API
answers 403: `CallContext.may_load` defaulted to True and those entry points did not say who called. Here a server
with two models, a user key and an admin key; the user asks for the model that is not loaded through each door."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.engine.http.test_api_mcp import mcp_session
from tests.models_fixture import SECOND, SECOND_ID, models_server
from tests.security.test_page_identity import page_client

USER, BOSS = "user-key-5d1f", "boss-key-8a2c"


@pytest.fixture(scope="module")
def two_models(settings: Any, tmp_path_factory: Any) -> Iterator[Any]:
    root: Path = tmp_path_factory.mktemp("models-rights")
    with models_server(settings, root, api_keys=[USER, BOSS], admin_keys=[BOSS], mcp=True) as server:
        yield server


def status(server: Any) -> str:
    r = httpx.get(f"{server.url}/v1/models/{SECOND_ID}", headers={"Authorization": f"Bearer {BOSS}"})
    return str(r.json()["status"])


def still_loadable(server: Any, seconds: float = 1.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if status(server) != "loadable":
            return False
        time.sleep(0.1)
    return True


def test_the_api_refuses_the_user_as_reference(two_models: Any) -> None:
    body = {"model": SECOND_ID, "messages": [{"role": "user", "content": SECOND.question}], "max_tokens": 2}
    r = httpx.post(f"{two_models.url}/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {USER}"})
    assert r.status_code == 403 and "admin key" in r.text
    assert still_loadable(two_models)


def test_mcp_with_a_user_key_does_not_load_a_model(two_models: Any) -> None:
    async def calls(session: Any) -> Any:
        return await session.call_tool("chat", {"message": SECOND.question, "max_tokens": 2, "model": SECOND_ID})

    result = mcp_session(two_models.url, calls, headers={"Authorization": f"Bearer {USER}"})
    assert result.isError and "admin key" in result.content[0].text
    assert still_loadable(two_models)


def test_the_pages_replay_with_a_user_key_does_not_load_a_model(two_models: Any) -> None:
    ui = page_client(two_models.url, ("anyone", USER))
    body = {"model": SECOND_ID, "messages": [{"role": "user", "content": SECOND.question}], "max_tokens": 2}
    out = ui.predict(json.dumps(body), api_name="/replay")
    assert "admin key" in str(out), out
    assert still_loadable(two_models)
