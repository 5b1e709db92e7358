"""Issue 31, item 9: a request whose model is unloaded while the request is being prepared fails promptly with a
503, never waits for a token that cannot come.

On ad58bb7 `Engine.submit` queued the request on the stopped engine: with `--request-timeout-s 0` the client
waited forever (here: until its own 60 s timeout). The unload waits only for the requests the engine holds; one
still rendering its template is not among them.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx

from tests.api_helpers import assert_v1_error
from tests.conftest import MODEL
from tests.models_fixture import models_server

# About two seconds of template work (a loop over a string, under the 5 s budget): the request is still being
# prepared when the model goes.
SLOW_TEMPLATE = (
    "{% set s = 'x' * 6000 %}{% for c in s %}{% for d in s %}{% endfor %}{% endfor %}{{ messages[0].content }}"
)


def test_a_request_prepared_while_its_model_unloads_gets_503(settings: Any, tmp_path_factory: Any) -> None:
    root = tmp_path_factory.mktemp("models-unload")
    with models_server(settings, root, request_timeout_s=0) as server, server.client() as c:
        answers: list[httpx.Response | BaseException] = []

        def victim() -> None:
            body = {
                "model": MODEL,
                "messages": [{"role": "user", "content": "hi"}],
                "max_tokens": 4,
                "chat_template": SLOW_TEMPLATE,
            }
            try:
                with httpx.Client(base_url=server.url, timeout=60) as own:
                    answers.append(own.post("/v1/chat/completions", json=body))
            except httpx.HTTPError as exc:  # ad58bb7: ReadTimeout after 60 s
                answers.append(exc)

        thread = threading.Thread(target=victim)
        thread.start()
        time.sleep(0.5)  # its template is rendering
        gone = c.post(f"/server/models/{MODEL}/unload")
        assert gone.status_code == 200 and gone.json()["unloaded"] is True, gone.text
        unloaded = time.monotonic()
        thread.join(timeout=70)
        waited = time.monotonic() - unloaded
        assert answers and isinstance(answers[0], httpx.Response), answers
        assert_v1_error(answers[0], 503, "unloaded")
        assert waited < 20, waited
