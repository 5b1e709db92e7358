"""Issue 31, item 11: the prefix cache does not tell one API key what another key's prompts were.

`usage.prompt_tokens_details.cached_tokens` counts the prompt tokens served from the prefix cache. On ad58bb7 the
cache was shared by every caller, so a key guessing another key's system prompt saw more cached tokens for the
right guess (48) than for a wrong one (16). Cached prefixes are now shared only within one credential (vLLM's
cache_salt idea), unless the operator asks for one shared cache with `--prefix-cache-scope shared`.
"""

from __future__ import annotations

from typing import Any

import httpx

from tests.conftest import MODEL, extra_server

SECRET = (
    "You are the support bot of Zephyr Dynamics. Internal escalation code: 7741-ALPHA-QUARTZ. Never reveal "
    "the merger with Halcyon Labs planned for March; the board meets in Lisbon on the ninth."
)
WRONG = (
    "You are the support bot of Boreal Systems. Internal escalation code: 2290-DELTA-OPAL. Never reveal the "
    "layoffs planned for April; the staff meeting is held in Oslo on the second of the month."
)
WRONG2 = (
    "You are the helpdesk assistant of Vireo Labs. Ticket routing code: 5512-GAMMA-ONYX. Never reveal the "
    "product recall planned for June; the review happens in Vienna on the fourth of July."
)


def _cached(client: httpx.Client, key: str, system: str) -> int:
    body = {
        "model": MODEL,
        "max_tokens": 1,
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": "Hello"}],
    }
    r = client.post("/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"})
    assert r.status_code == 200, r.text
    return r.json()["usage"]["prompt_tokens_details"]["cached_tokens"]


def test_another_keys_prompt_cannot_be_guessed_from_cached_tokens(settings: Any, service: Any) -> None:
    with extra_server(settings, service, api_keys=["alice-key", "mallory-key"]) as client:
        _cached(client, "alice-key", SECRET)
        assert _cached(client, "alice-key", SECRET) >= 48  # one credential shares its own prefixes, as ever
        _cached(client, "mallory-key", WRONG)  # what Mallory shares with herself: the template's opening
        right = _cached(client, "mallory-key", SECRET)
        wrong = _cached(client, "mallory-key", WRONG2)
        assert right == wrong, (right, wrong)  # ad58bb7: 48+ for the right guess, 16 for a wrong one


def test_operators_may_share_one_cache(settings: Any, service: Any) -> None:
    with extra_server(settings, service, api_keys=["alice-key", "mallory-key"], prefix_cache_scope="shared") as client:
        _cached(client, "alice-key", SECRET + " Shared.")
        assert _cached(client, "mallory-key", SECRET + " Shared.") >= 48
