"""POST /v1/completions (issue 33, item 1) against the live server with real clients: the openai SDK's
`completions.create` (echo and logprobs, stream and not) and httpx for every field rule and error shape. The route
runs each prompt through the chat route's one policy; a non-stream answer is the fold of the stream."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.api_helpers import assert_422, assert_v1_error, ok
from tests.conftest import MODEL, sse_events

PATH = "/v1/completions"
PROMPT = "The capital of France is"


def complete(http: httpx.Client, **body: Any) -> httpx.Response:
    body.setdefault("model", MODEL)
    body.setdefault("prompt", PROMPT)
    return http.post(PATH, json=body)


def stream_events(r: httpx.Response) -> list[dict[str, Any]]:
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/event-stream")
    events = sse_events(r.text)
    assert events[-1] == "[DONE]" and events.count("[DONE]") == 1
    return events[:-1]


def test_shape_of_a_plain_completion(http: httpx.Client) -> None:
    r = complete(http, max_tokens=4, temperature=0)
    body = ok(r)
    assert body["object"] == "text_completion" and body["id"].startswith("cmpl-") and body["model"] == MODEL
    assert r.headers["x-request-id"] == body["id"]
    (choice,) = body["choices"]
    assert choice["index"] == 0 and isinstance(choice["text"], str) and choice["text"]
    assert choice["logprobs"] is None and choice["finish_reason"] in ("length", "stop")
    usage = body["usage"]
    assert (
        usage["completion_tokens"] <= 4 and usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    )
    # MindIE's extras as on the chat route
    assert len(usage["batch_size"]) == len(usage["queue_wait_time"]) == usage["completion_tokens"]
    assert "cached_tokens" in usage["prompt_tokens_details"]
    assert isinstance(body["prefill_time"], int) and len(body["decode_time_arr"]) == usage["completion_tokens"] - 1


def test_max_tokens_defaults_to_16(http: httpx.Client) -> None:
    body = ok(complete(http, prompt="Once upon a time", temperature=0, ignore_eos=True))
    assert body["usage"]["completion_tokens"] == 16 and body["choices"][0]["finish_reason"] == "length"


def test_no_chat_template_is_applied(http: httpx.Client) -> None:
    """The prompt is tokenized as it is: its token count is the tokenizer's, far below a chat-rendered one."""
    body = ok(complete(http, prompt="hi", max_tokens=1))
    chat = ok(
        http.post(
            "/v1/chat/completions",
            json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1},
        )
    )
    assert body["usage"]["prompt_tokens"] < chat["usage"]["prompt_tokens"]
    assert body["usage"]["prompt_tokens"] <= 2


def test_greedy_text_is_the_continuation_and_token_prompts_give_the_same(http: httpx.Client) -> None:
    text = ok(complete(http, max_tokens=5, temperature=0, echo=True, logprobs=0))
    ids_body = ok(complete(http, prompt=PROMPT, max_tokens=5, temperature=0))
    assert text["choices"][0]["text"] == PROMPT + ids_body["choices"][0]["text"]


def test_echo_with_logprobs_covers_the_prompt(http: httpx.Client) -> None:
    body = ok(complete(http, max_tokens=3, temperature=0, echo=True, logprobs=2))
    (choice,) = body["choices"]
    lp = choice["logprobs"]
    prompt_tokens, completion_tokens = body["usage"]["prompt_tokens"], body["usage"]["completion_tokens"]
    assert set(lp) == {"tokens", "token_logprobs", "top_logprobs", "text_offset"}
    assert len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["top_logprobs"]) == len(lp["text_offset"])
    assert len(lp["tokens"]) == prompt_tokens + completion_tokens
    assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
    assert all(isinstance(v, float) and v <= 0 for v in lp["token_logprobs"][1:])
    assert choice["text"].startswith(PROMPT)
    assert "".join(lp["tokens"][:prompt_tokens]) == PROMPT  # the prompt's own tokens, in order
    assert lp["text_offset"][0] == 0 and lp["text_offset"][prompt_tokens] == len(PROMPT)
    for tok, value, top in zip(lp["tokens"][1:], lp["token_logprobs"][1:], lp["top_logprobs"][1:]):
        assert top[tok] == value and 1 <= len(top) <= 3  # the token itself and up to 2 others
    assert choice["prompt_logprobs"] is None  # not asked for


def test_a_prompt_tokens_logprob_is_what_generating_it_gave(http: httpx.Client) -> None:
    """The prefill's score of a token equals the decode's: generate one greedy token, then score prompt + it."""
    first = ok(complete(http, max_tokens=1, temperature=0, logprobs=1))
    token, value = first["choices"][0]["logprobs"]["tokens"][0], first["choices"][0]["logprobs"]["token_logprobs"][0]
    scored = ok(complete(http, prompt=PROMPT + token, max_tokens=1, temperature=0, echo=True, logprobs=1))
    lp = scored["choices"][0]["logprobs"]
    n = scored["usage"]["prompt_tokens"]
    assert lp["tokens"][n - 1] == token
    assert lp["token_logprobs"][n - 1] == pytest.approx(value, abs=2e-2)


def test_prompt_logprobs_per_choice(http: httpx.Client) -> None:
    body = ok(complete(http, prompt=["Red, green and", "One, two,"], max_tokens=1, prompt_logprobs=2))
    assert [c["index"] for c in body["choices"]] == [0, 1]
    for c in body["choices"]:
        entries = c["prompt_logprobs"]
        assert entries[0] is None and all(1 <= len(e) <= 3 for e in entries[1:])
        assert all(set(v) == {"logprob", "rank", "decoded_token"} for e in entries[1:] for v in e.values())
    lengths = [len(c["prompt_logprobs"]) for c in body["choices"]]
    assert sum(lengths) == body["usage"]["prompt_tokens"]  # each choice's list is its own prompt's


def test_several_prompts_and_n_number_choices_as_vllm(http: httpx.Client) -> None:
    body = ok(complete(http, prompt=["Red, green and", "One, two,"], n=2, max_tokens=2, temperature=0.8, seed=1))
    assert [c["index"] for c in body["choices"]] == [0, 1, 2, 3]
    alone = [
        ok(complete(http, prompt=p, max_tokens=2, temperature=0, echo=True))["choices"][0]["text"]
        for p in ("Red, green and", "One, two,")
    ]
    greedy = ok(complete(http, prompt=["Red, green and", "One, two,"], max_tokens=2, temperature=0, echo=True))
    assert [c["text"] for c in greedy["choices"]] == alone  # prompt i is choice i
    usage = greedy["usage"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


def test_token_id_prompts(http: httpx.Client) -> None:
    one = ok(complete(http, prompt=[1, 2, 3], max_tokens=2))
    assert one["usage"]["prompt_tokens"] == 3
    two = ok(complete(http, prompt=[[1, 2], [3, 4, 5]], max_tokens=1))
    assert [c["index"] for c in two["choices"]] == [0, 1] and two["usage"]["prompt_tokens"] == 5
    echo = ok(complete(http, prompt=[3575, 282, 4649], max_tokens=1, echo=True, logprobs=0))  # SmolLM2's ids
    assert echo["choices"][0]["text"].startswith(" capital of France")
    assert echo["choices"][0]["logprobs"]["tokens"][:3] == [" capital", " of", " France"]


def test_stream_chunks_usage_and_done(http: httpx.Client) -> None:
    r = complete(http, max_tokens=4, temperature=0, stream=True, stream_options={"include_usage": True})
    events = stream_events(r)
    assert r.headers["x-request-id"] == events[0]["id"]
    assert all(e["object"] == "text_completion" and e["id"] == events[0]["id"] for e in events)
    text = "".join(e["choices"][0]["text"] for e in events if e["choices"])
    final = events[-1]
    assert final["choices"] == [] and final["usage"]["completion_tokens"] >= 1
    assert len(final["usage"]["queue_wait_time"]) == final["usage"]["completion_tokens"]
    closing = [e["choices"][0] for e in events if e["choices"] and e["choices"][0]["finish_reason"]]
    assert len(closing) == 1
    plain = ok(complete(http, max_tokens=4, temperature=0))
    assert text == plain["choices"][0]["text"]  # the non-stream answer is the fold of the stream


def test_stream_without_include_usage_has_no_usage_chunk(http: httpx.Client) -> None:
    events = stream_events(complete(http, max_tokens=2, stream=True))
    assert all(e["choices"] for e in events)


def test_stream_echo_and_logprobs(http: httpx.Client) -> None:
    events = stream_events(complete(http, max_tokens=3, temperature=0, stream=True, echo=True, logprobs=1))
    first = events[0]["choices"][0]
    assert first["text"].startswith(PROMPT)
    assert first["logprobs"]["token_logprobs"][0] is None
    plain = ok(complete(http, max_tokens=3, temperature=0, echo=True, logprobs=1))
    joined: dict[str, list[Any]] = {"tokens": [], "token_logprobs": [], "text_offset": []}
    for e in events:
        for key in joined:
            joined[key] += e["choices"][0]["logprobs"][key]
    want = plain["choices"][0]["logprobs"]
    assert joined["tokens"] == want["tokens"] and joined["text_offset"] == want["text_offset"]
    assert "".join(e["choices"][0]["text"] for e in events) == plain["choices"][0]["text"]


def test_best_of_above_n_is_honoured(http: httpx.Client) -> None:
    body = ok(complete(http, n=1, best_of=3, max_tokens=3, temperature=1.0, seed=5, logprobs=0))
    assert len(body["choices"]) == 1


def test_stop_and_stop_token_ids(http: httpx.Client) -> None:
    body = ok(complete(http, prompt="1, 2, 3, 4,", max_tokens=12, temperature=0, stop=["7"]))
    assert "7" not in body["choices"][0]["text"] and body["choices"][0]["finish_reason"] == "stop"


@pytest.mark.parametrize(
    ("fields", "fragment"),
    [
        ({"prompt": ""}, "prompt"),
        ({"prompt": []}, "prompt"),
        ({"prompt": [[]]}, "prompt[0]"),
        ({"prompt": ["a", 1]}, "prompt"),
        ({"prompt": [1, -2]}, "prompt[1]"),
        ({"prompt": [10**9]}, "vocabulary"),
        ({"prompt": [[1], [10**9]]}, "prompt[1][0]"),
        ({"prompt": {"text": "x"}}, "prompt"),
        ({"prompt": None}, "prompt"),
        ({"suffix": "x"}, "suffix"),
        ({"logprobs": 21}, "logprobs"),
        ({"logprobs": True}, "logprobs"),
        ({"echo": "yes"}, "echo"),
        ({"temperature": 3}, "temperature"),
        ({"n": 2, "best_of": 1, "temperature": 1}, "best_of"),
        ({"n": 2, "temperature": 0}, "temperature"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"model": "nope"}, "Model not found"),
        ({"prompt_logprobs": 21}, "prompt_logprobs"),
        ({"stream_options": {"include_usage": True}}, "stream_options"),
    ],
)
def test_field_rules(http: httpx.Client, fields: dict[str, Any], fragment: str) -> None:
    body = {"model": MODEL, "prompt": PROMPT, "max_tokens": 1, **fields}
    assert_422(http.post(PATH, json={k: v for k, v in body.items() if v is not None}), fragment)


def test_missing_fields_and_bad_json(http: httpx.Client) -> None:
    assert_422(http.post(PATH, json={"model": MODEL}), "prompt")
    assert_422(http.post(PATH, json={"prompt": "x"}), "model")
    assert_422(http.post(PATH, content=b"{", headers={"content-type": "application/json"}), "JSON")
    assert_422(http.post(PATH, json=[1]), "object")


def test_a_prompt_longer_than_the_context_is_the_chat_routes_4xx(http: httpx.Client, live: Any) -> None:
    ctx = live.service.model.context_length
    r = complete(http, prompt=[5] * (ctx + 10), max_tokens=1)
    chat = http.post(
        "/v1/chat/completions",
        json={"model": MODEL, "max_tokens": 1, "messages": [{"role": "user", "content": "hi " * (ctx + 10)}]},
    )
    assert r.status_code == chat.status_code == 422
    assert_422(r, "token length")


def test_method_and_metrics_label(http: httpx.Client) -> None:
    assert_v1_error(http.get(PATH), 405)
    ok(complete(http, max_tokens=1))
    metrics = http.get("/metrics").text
    assert f'route="{PATH}"' in metrics


def test_openapi_documents_the_route(http: httpx.Client) -> None:
    doc = http.get("/openapi.json").json()
    op = doc["paths"][PATH]["post"]
    assert set(op["responses"]) == {"200", "401", "403", "413", "422", "429", "500", "503"}
    props = doc["components"]["schemas"]["CompletionRequest"]["properties"]
    assert {"prompt", "echo", "logprobs", "suffix", "max_tokens", "best_of", "stop_token_ids"} <= set(props)
    assert props["max_tokens"]["default"] == 16


# ---- the official openai SDK -----------------------------------------------------------------------------------


def test_openai_sdk_echo_and_logprobs(oai: Any) -> None:
    r = oai.completions.create(model=MODEL, prompt=PROMPT, max_tokens=3, temperature=0, echo=True, logprobs=2)
    (choice,) = r.choices
    assert r.object == "text_completion" and choice.text.startswith(PROMPT)
    lp = choice.logprobs
    assert lp.token_logprobs[0] is None and len(lp.tokens) == r.usage.prompt_tokens + r.usage.completion_tokens
    assert lp.text_offset[0] == 0 and all(isinstance(t, dict) for t in lp.top_logprobs[1:])


def test_openai_sdk_stream(oai: Any) -> None:
    stream = oai.completions.create(
        model=MODEL,
        prompt=PROMPT,
        max_tokens=3,
        temperature=0,
        echo=True,
        logprobs=1,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text.startswith(PROMPT)
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens >= 1
    plain = oai.completions.create(model=MODEL, prompt=PROMPT, max_tokens=3, temperature=0, echo=True)
    assert text == plain.choices[0].text


def test_openai_sdk_batch_of_prompts(oai: Any) -> None:
    r = oai.completions.create(model=MODEL, prompt=["a", "b", "c"], max_tokens=1)
    assert [c.index for c in r.choices] == [0, 1, 2]
    json.dumps(r.model_dump())


# ---- what the chat route's sampling fields bring to completions (the `structured` branch, merged) ----


def test_logit_bias_and_its_rules_apply_to_completions(http: httpx.Client, live: Any) -> None:
    forced = live.service.tokenizer.encode(" banana", add_special_tokens=False)[0]
    body = ok(complete(http, max_tokens=3, temperature=0, logit_bias={str(forced): 100}))
    assert body["choices"][0]["text"] == live.service.tokenizer.decode([forced] * 3)
    assert_422(complete(http, max_tokens=1, logit_bias={"7": 101}), "logit_bias")
    assert_422(complete(http, max_tokens=1, logit_bias={"99999999": 1}), "vocabulary")


def test_structured_outputs_constrain_a_completion(http: httpx.Client) -> None:
    body = ok(complete(http, max_tokens=4, temperature=0, structured_outputs={"choice": ["Paris", "Lyon"]}))
    assert body["choices"][0]["text"] in ("Paris", "Lyon")
    body = ok(complete(http, max_tokens=8, temperature=0, guided_regex="[0-9]{3}"))
    assert body["choices"][0]["text"].isdigit() and len(body["choices"][0]["text"]) == 3
    assert_422(complete(http, max_tokens=1, guided_regex="(ab"), "regex")
    assert_422(complete(http, max_tokens=1, guided_regex="a", guided_choice=["a"]), "guided")
