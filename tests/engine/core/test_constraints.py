"""Constrained decoding (engine/core/constraints.py) against the real SmolLM2 tokenizer and, at the end, the model."""

from __future__ import annotations

import json
import os
import random
import re
from pathlib import Path
from typing import Any

import pytest
import torch

from engine.core import constraints
from engine.core.constraints import ConstraintFactory, apply_mask

LAYER = "model"  # what this module's own fixtures or bodies need (tests/conftest.py)


@pytest.fixture(scope="module")
def model_dir() -> Path:
    """The bundled model's converted directory, in the same cache the app uses (XDG_CACHE_HOME or
    PLAYGROUND_CACHE_DIR honoured; fetched and converted here if this module runs first)."""
    from engine.models import cache_root, resolve_model_dir

    return resolve_model_dir("", cache_root(os.environ.get("PLAYGROUND_CACHE_DIR", "")))[0]


@pytest.fixture(scope="module")
def tok(model_dir: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_dir)


@pytest.fixture(scope="module")
def vocab(model_dir: Path) -> int:
    return json.loads((model_dir / "config.json").read_text())["vocab_size"]


@pytest.fixture(scope="module")
def factory(tok: Any, vocab: int) -> ConstraintFactory:
    return ConstraintFactory(tok, vocab)


def ids(tok: Any, text: str) -> list[int]:
    return tok.encode(text, add_special_tokens=False)


def feed(c: Any, tok: Any, text: str) -> None:
    for t in ids(tok, text):
        assert c.accept(t), (text, tok.decode([t]))


def walk(c: Any, tok: Any, vocab: int, seed: int, wander: int = 30, limit: int = 400) -> list[int]:
    """Random allowed tokens for `wander` steps, then prefer tokens that close things so the walk ends."""
    rng = random.Random(seed)
    closers = [tok.eos_token_id, *(tok.convert_tokens_to_ids(s) for s in ['"', "}", "]", "0", ":"])]
    out: list[int] = []
    while not c.finished():
        assert len(out) < limit, tok.decode(out)
        mask = c.allowed(vocab)
        allowed = mask.nonzero().flatten().tolist()
        assert allowed, tok.decode(out)
        pick = next((t for t in closers if mask[t]), None) if len(out) >= wander else None
        token = rng.choice(allowed) if pick is None else pick
        assert c.accept(token)
        out.append(token)
    assert out[-1] == tok.eos_token_id or c.allowed(vocab).nonzero().flatten().tolist() == [tok.eos_token_id]
    return [t for t in out if t != tok.eos_token_id]


TYPES = {"string": str, "integer": int, "number": (int, float), "boolean": bool, "array": list, "object": dict}


def conforms(value: Any, schema: dict) -> bool:
    """Enough of JSON Schema for the schemas below."""
    t = schema.get("type")
    if t == "null":
        return value is None
    if isinstance(value, bool) and t in ("integer", "number"):
        return False
    if t and not isinstance(value, TYPES[t]):
        return False
    if "enum" in schema and value not in schema["enum"]:
        return False
    if t == "array":
        return all(conforms(v, schema.get("items", {})) for v in value)
    if t == "object":
        props = schema.get("properties", {})
        if not set(schema.get("required", [])) <= value.keys():
            return False
        if schema.get("additionalProperties") is False and not value.keys() <= props.keys():
            return False
        return all(conforms(v, props.get(k, {})) for k, v in value.items())
    return True


SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer"},
        "height": {"type": "number"},
        "admin": {"type": "boolean"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "pet": {"type": "object", "properties": {"kind": {"enum": ["cat", "dog"]}}, "required": ["kind"]},
        "nothing": {"type": "null"},
    },
    "required": ["name", "age", "height", "admin", "tags", "pet", "nothing"],
    "additionalProperties": False,
}


def test_mask_is_a_bool_vector_of_the_asked_width(factory: ConstraintFactory, tok: Any, vocab: int) -> None:
    c = factory.json_object()
    mask = c.allowed(vocab)
    assert mask.shape == (vocab,) and mask.dtype == torch.bool
    assert mask[ids(tok, "{")[0]] and not mask[ids(tok, "a")[0]] and not mask[tok.eos_token_id]
    assert c.allowed(vocab + 7).shape == (vocab + 7,) and not c.allowed(vocab + 7)[vocab:].any()
    assert torch.equal(c.allowed(vocab - 5), mask[: vocab - 5])


def test_apply_mask_sets_disallowed_and_extra_columns_to_minus_inf() -> None:
    logits = torch.arange(6, dtype=torch.float32)
    out = apply_mask(logits, torch.tensor([True, False, True, False]))
    assert out is logits
    assert logits.tolist() == [0.0, float("-inf"), 2.0, float("-inf"), float("-inf"), float("-inf")]
    assert apply_mask(torch.ones(3), None).tolist() == [1.0, 1.0, 1.0]
    half = apply_mask(torch.zeros(4, dtype=torch.bfloat16), torch.tensor([False, True, True]))  # the torch path
    assert half.tolist() == [float("-inf"), 0.0, 0.0, float("-inf")]


@pytest.mark.parametrize("seed", range(5))
def test_random_walk_in_json_object_gives_a_json_object(
    factory: ConstraintFactory, tok: Any, vocab: int, seed: int
) -> None:
    text = tok.decode(walk(factory.json_object(), tok, vocab, seed))
    assert isinstance(json.loads(text), dict), text


@pytest.mark.parametrize("seed", range(5))
def test_random_walk_in_a_schema_gives_a_conforming_object(
    factory: ConstraintFactory, tok: Any, vocab: int, seed: int
) -> None:
    text = tok.decode(walk(factory.json_schema(SCHEMA), tok, vocab, seed))
    value = json.loads(text)
    assert conforms(value, SCHEMA), text
    assert list(value) == list(SCHEMA["properties"])  # properties come in the schema's order


def test_a_refused_token_leaves_the_state_usable(factory: ConstraintFactory, tok: Any, vocab: int) -> None:
    c = factory.json_object()
    assert not c.accept(ids(tok, "hello")[0])
    assert not c.accept(tok.eos_token_id)
    assert not c.accept(vocab + 100) and not c.accept(-1)
    feed(c, tok, '{"a": 1')
    assert not c.accept(ids(tok, "{")[0])
    feed(c, tok, "}")
    assert c.finished()


def test_finished_allows_only_eos_which_it_accepts(factory: ConstraintFactory, tok: Any, vocab: int) -> None:
    c = factory.json_schema({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]})
    feed(c, tok, '{"a": 12')
    assert not c.finished() and not c.allowed(vocab)[tok.eos_token_id]
    feed(c, tok, "}")
    assert c.finished()
    assert c.allowed(vocab).nonzero().flatten().tolist() == [tok.eos_token_id]
    assert c.accept(tok.eos_token_id) and c.finished()


def test_a_top_level_number_ends_only_on_eos(factory: ConstraintFactory, tok: Any, vocab: int) -> None:
    c = factory.json_schema({"type": "integer"})
    feed(c, tok, "12")
    assert not c.finished() and c.allowed(vocab)[tok.eos_token_id]  # more digits may follow
    assert c.accept(tok.eos_token_id) and c.finished()


def test_extra_eos_ids_are_all_allowed_at_the_end(tok: Any, vocab: int) -> None:
    other = tok.convert_tokens_to_ids("<|endoftext|>")
    f = ConstraintFactory(tok, vocab, eos_ids={tok.eos_token_id, other})
    c = f.json_object()
    feed(c, tok, "{}")
    assert c.allowed(vocab).nonzero().flatten().tolist() == sorted({tok.eos_token_id, other})
    assert c.fork().accept(other) and c.accept(tok.eos_token_id)


def test_forks_are_independent(factory: ConstraintFactory, tok: Any, vocab: int) -> None:
    a = factory.json_schema(SCHEMA)
    feed(a, tok, '{"name": "x", "age": ')
    b = a.fork()
    feed(a, tok, "1")
    assert not b.accept(ids(tok, ",")[0])  # b still needs the value
    feed(b, tok, "22")
    assert not torch.equal(a.allowed(vocab), factory.json_schema(SCHEMA).allowed(vocab))
    rest = ', "height": 1.5, "admin": true, "tags": [], "pet": {"kind": "cat"}, "nothing": null}'
    feed(a, tok, rest)
    feed(b, tok, rest)
    assert a.finished() and b.finished()


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        ({"type": "strnig"}, "Invalid type: strnig"),
        ({"type": "object", "properties": {"a": {"$ref": "#/$defs/x"}}}, "/$defs/x"),
        ({"type": "string", "minLength": 5, "maxLength": 2}, "minLength"),
        ({"type": "string", "pattern": "(?<=a)b"}, "look-around"),
        ([{"type": "string"}], "must be a JSON object"),
    ],
)
def test_schemas_it_cannot_compile_raise_a_short_value_error(
    factory: ConstraintFactory, schema: Any, message: str
) -> None:
    with pytest.raises(ValueError, match="cannot enforce this JSON schema") as err:
        factory.json_schema(schema)
    assert message in str(err.value) and len(str(err.value)) < 300 and "\n" not in str(err.value)


def test_compiled_grammars_are_cached_and_bounded(tok: Any, vocab: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(constraints, "CACHE_SIZE", 2)
    f = ConstraintFactory(tok, vocab)
    schemas = [{"type": "object", "properties": {k: {"type": "integer"}}} for k in "abc"]
    f.json_schema(schemas[0])
    f.json_schema(schemas[0])
    assert len(f._cache) == 1
    for s in schemas:
        f.json_schema(s)
    assert len(f._cache) == 2 and not any('"a"' in k for k in f._cache)


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    },
    {"type": "function", "function": {"name": "now"}},
]
HERMES = re.compile(r"<tool_call>\s*(\{.*?\})\s*</tool_call>", re.DOTALL)  # the parser's rule (spec 8.2)


def test_named_tool_call_accepts_a_hermes_block_of_that_tool(factory: ConstraintFactory, tok: Any) -> None:
    c = factory.tool_call(TOOLS, "get_weather")
    assert c is not None
    feed(c, tok, '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>')
    assert c.finished()
    other = factory.tool_call(TOOLS, "get_weather")
    feed(other, tok, '<tool_call>\n{"name": "')
    assert not other.accept(ids(tok, "now")[0])
    assert factory.tool_call(TOOLS, "missing") is None


@pytest.mark.parametrize("seed", range(3))
def test_required_tool_call_walk_parses_as_calls(factory: ConstraintFactory, tok: Any, vocab: int, seed: int) -> None:
    text = tok.decode(walk(factory.tool_call(TOOLS, None), tok, vocab, seed))
    calls = [json.loads(m) for m in HERMES.findall(text)]
    assert calls and text.startswith("<tool_call>\n") and text.endswith("\n</tool_call>"), text
    for call in calls:
        assert call["name"] in {"get_weather", "now"} and isinstance(call["arguments"], dict)
        if call["name"] == "get_weather":
            assert isinstance(call["arguments"]["city"], str)


def test_tool_with_uncompilable_parameters_falls_back_to_any_object(factory: ConstraintFactory, tok: Any) -> None:
    bad = [{"type": "function", "function": {"name": "f", "parameters": {"type": "strnig"}}}]
    c = factory.tool_call(bad, "f")
    assert c is not None
    feed(c, tok, '<tool_call>\n{"name": "f", "arguments": {"x": [1]}}\n</tool_call>')
    assert c.finished()


def test_greedy_generation_with_the_real_model_gives_json(model_dir: Path, tok: Any, factory: Any, vocab: int) -> None:
    from transformers import AutoModelForCausalLM, DynamicCache

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string", "maxLength": 20}, "legs": {"type": "integer", "maximum": 10}},
        "required": ["name", "legs"],
        "additionalProperties": False,
    }
    messages = [{"role": "user", "content": "Describe a cat as JSON with its name and number of legs."}]
    prompt = tok.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    for c, want in ((factory.json_schema(schema), schema), (factory.json_object(), {"type": "object"})):
        input_ids, out, cache = prompt["input_ids"], [], DynamicCache(config=model.config)
        with torch.no_grad():
            for _ in range(40):
                logits = model(input_ids=input_ids, cache=cache, use_cache=True).logits[0, -1].float()
                token = int(torch.argmax(apply_mask(logits, c.allowed(vocab))))
                assert c.accept(token)
                if token == tok.eos_token_id:
                    break
                out.append(token)
                if c.finished():
                    break
                input_ids = torch.tensor([[token]])
        text = tok.decode(out)
        assert c.finished(), text
        assert conforms(json.loads(text), want), text
