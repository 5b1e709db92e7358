"""What the chat routes' validation refuses beyond each field's own type and range, written as JSON Schema.

openapi.py starts from the pydantic request model's own schema (types, enums, ranges: the very annotations that
validate) and adds here what lives in its validators, in the server's limits and in the served model, so that a
body the document allows is one the server takes: the message rules per role (messages.py `_check_role_rules`),
the cross-field rules (request.py `_cross_field_rules`, §2.4), the server caps (`max_n`, beam search's 128 tokens,
params.py), the Pangu narrowing (pangu.py, §2.5) and what the loaded model takes (its name, its input modalities,
whether it calls tools). Every constant comes from the module that enforces it; what JSON Schema cannot say (sums,
depths, token counts, whether media decodes) is said in a `description`.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

from engine.protocol.messages import FUNCTION_NAME_RE, MEDIA_MODALITY
from engine.protocol.pangu import MAX_MESSAGES
from engine.protocol.request_parts import INT32_MAX, MAX_MEDIA_ITEMS, RESERVED_TEMPLATE_KWARGS
from engine.protocol.tools import MAX_TOOLS, MAX_TOOLS_DEPTH
from engine.serving.params import BEAM_MAX_TOKENS

REF = "#/components/schemas/{model}"
NULL = {"type": "null"}
PART_MODELS = {
    "text": "TextPart",
    "image_url": "ImageURLPart",
    "video_url": "VideoURLPart",
    "audio_url": "AudioURLPart",
    "input_audio": "InputAudioPart",
}
FUNCTION_NAME = "^" + FUNCTION_NAME_RE.pattern + "$"
# templates.py `_looks_like_path`: one line that starts like a path, or ends in .jinja without a "{".
TEMPLATE_PATH = "^(?:(?:/|\\./|\\.\\./|~|file:)[^\\n]*|[^{\\n]*\\.jinja)$"
# Cross-field rules on small integers are spelled out value by value up to this max_n; above it, only described.
ENUMERATED_MAX_N = 16


@dataclass(frozen=True)
class Deployment:
    """What the document states about this server: its caps and, once loaded, its model."""

    max_n: int = 8
    max_new_tokens: int = 512
    pangu_strict: bool = True
    model: str | None = None  # the served name; None while loading (any non-empty string is then documented)
    modalities: tuple[str, ...] = ("text", "image", "video", "audio")
    tools: bool = True  # whether the model's own template has a tool-call parser
    context_length: int | None = None


def ref(name: str) -> dict[str, str]:
    return {"$ref": REF.format(model=name)}


# The JSON type of each field a cross-field rule reads: a typed "given" needs no `not null`, which keeps the
# rules simple enough for schema-driven generators (schemathesis) to intersect.
FIELD_TYPES = {
    "n": "integer",
    "best_of": "integer",
    "top_logprobs": "integer",
    "max_tokens": "integer",
    "max_completion_tokens": "integer",
    "temperature": "number",
    "stream_options": "object",
    "chat_template_kwargs": "object",
    "response_format": "object",
    "tools": "array",
    "messages": "array",
    "stop": ["string", "array"],
    "tool_choice": ["string", "object"],
}


def given(name: str, **constraints: Any) -> dict[str, Any]:
    """The field is sent, not null (null means absent, §2.1.2), and meets `constraints`."""
    return {"required": [name], "properties": {name: {"type": FIELD_TYPES[name], **constraints}}}


def is_(name: str, value: Any) -> dict[str, Any]:
    return {"required": [name], "properties": {name: {"const": value}}}


def absent(name: str) -> dict[str, Any]:
    """Not sent, or null."""
    return {"properties": {name: NULL}}


def not_true(name: str) -> dict[str, Any]:
    """A boolean field that is false, null or not sent."""
    return {"properties": {name: {"enum": [False, None]}}}


def either(description: str, *branches: dict[str, Any]) -> dict[str, Any]:
    """A two-field rule as JSON Schema proper: the body meets one of `branches`."""
    return {"description": description, "anyOf": list(branches)}


def refused(description: str, *together: dict[str, Any]) -> dict[str, Any]:
    """A combination validation refuses (an `x-refused-when` entry): a body that meets all of `together`."""
    return {"description": description, "allOf": list(together)}


def _either(*branches: dict[str, Any]) -> dict[str, Any]:
    return branches[0] if len(branches) == 1 else {"anyOf": list(branches)}


def part_types(modalities: tuple[str, ...], text_only: bool) -> list[str]:
    """Content-part types a user message may carry: text, and the media parts of the modalities taken."""
    return ["text"] + ([] if text_only else [p for p, m in MEDIA_MODALITY.items() if m in modalities])


def message_variants(modalities: tuple[str, ...], *, text_only: bool, role_optional: bool) -> list[dict[str, Any]]:
    """messages.py `_check_role_rules` per role: who needs content, of what kind, and the tool message's id."""
    text = {"anyOf": [{"type": "string", "minLength": 1}, {"type": "array", "minItems": 1, "items": ref("TextPart")}]}
    parts = [ref(PART_MODELS[t]) for t in part_types(modalities, text_only)]
    user = {"anyOf": [{"type": "string", "minLength": 1}, {"type": "array", "minItems": 1, "items": _either(*parts)}]}

    def role(name: str) -> dict[str, Any]:
        return {"anyOf": [{"const": name}, NULL]} if role_optional and name == "user" else {"const": name}

    def variant(name: str, description: str, required: list[str], **props: Any) -> dict[str, Any]:
        need = required if role_optional and name == "user" else ["role", *required]
        return {"description": description, "required": need, "properties": {"role": role(name), **props}}

    return [
        variant("system", "A system message: non-empty text.", ["content"], content=text),
        variant(
            "user",
            "A user message: non-empty text, or parts the model takes (media only here).",
            ["content"],
            content=user,
        ),
        variant("assistant", "An assistant message with text.", ["content"], content=text),
        variant(
            "assistant",
            "An assistant message with tool calls: content may be absent, null or empty.",
            ["tool_calls"],
            tool_calls={"type": "array", "minItems": 1},
            content={"anyOf": [{"type": "string"}, {"type": "array", "items": ref("TextPart")}, NULL]},
        ),
        variant(
            "tool",
            "A tool result: string content and the call's id.",
            ["content", "tool_call_id"],
            content={"type": "string"},
            tool_call_id={"type": "string", "minLength": 1},
        ),
    ]


def tighten_defs(defs: dict[str, Any]) -> None:
    """Rules of the shared sub-models that their validators (not their annotations) enforce."""
    for name in ("FunctionDefinition", "FunctionCall"):
        defs[name]["properties"]["name"]["pattern"] = FUNCTION_NAME
    params = defs["FunctionDefinition"]["properties"]["parameters"]["anyOf"][0]
    params.update(
        required=["type"],
        properties={"type": {"const": "object"}},
        description="A JSON Schema whose `type` is 'object'.",
    )
    defs["ResponseFormat"]["anyOf"] = [
        {"properties": {"type": {"enum": ["text", "json_object"]}}},
        {"required": ["json_schema"], "properties": {"type": {"const": "json_schema"}, "json_schema": {"not": NULL}}},
    ]


def any_case(word: str) -> list[str]:
    """Every spelling of `word` in upper and lower case letters ("true", "True", "tRUE", ...)."""
    return ["".join(letters) for letters in itertools.product(*((c.lower(), c.upper()) for c in word))]


# The rules below are written so that each is few branches once schema-driven generators (schemathesis's
# canonicaliser) multiply them out: one `enum` rather than an `anyOf` of a const and a pattern, and a keyword that
# lets null through by itself (`maximum`, `maxItems`, `properties` ignore other types; the property's own schema
# keeps the type) rather than an `anyOf` with null. Past a few hundred branches in all, the Pangu schemas could not
# be generated from at all ("Schema Error").
def admits_null(prop: dict[str, Any]) -> bool:
    kinds = prop.get("type")
    if kinds == "null" or (isinstance(kinds, list) and "null" in kinds):
        return True
    if None in prop.get("enum", ()) or ("const" in prop and prop["const"] is None):
        return True
    return any(admits_null(branch) for branch in (*prop.get("anyOf", ()), *prop.get("oneOf", ())))


def null_means_absent(schema: dict[str, Any]) -> None:
    """§2.1.2: null for an optional field means "absent", so every optional property of `schema` admits it (a
    boolean with a default, an object, a role that may be left out): the document says what validation takes."""
    required = set(schema.get("required", ()))
    for name, prop in schema.get("properties", {}).items():
        if name in required or admits_null(prop):
            continue
        if isinstance(prop.get("type"), str):
            prop["type"] = [prop["type"], "null"]
            if "enum" in prop:
                prop["enum"] = [*prop["enum"], None]
        elif "anyOf" in prop:
            prop["anyOf"] = [*prop["anyOf"], NULL]
        else:
            schema["properties"][name] = {"anyOf": [prop, NULL]}


def stream_is_true(pangu: bool) -> dict[str, Any]:
    if not pangu:
        return is_("stream", True)
    return {"required": ["stream"], "properties": {"stream": {"enum": [True, *any_case("true")]}}}


def stream_is_false(pangu: bool) -> dict[str, Any]:
    if not pangu:
        return not_true("stream")
    return {"properties": {"stream": {"enum": [False, None, *any_case("false")]}}}


def _max_tokens_above(limit: int) -> dict[str, Any]:
    """The effective max_tokens (max_completion_tokens wins, §2.2) exceeds `limit`."""
    return {
        "anyOf": [
            given("max_completion_tokens", minimum=limit + 1),
            {"allOf": [absent("max_completion_tokens"), given("max_tokens", minimum=limit + 1)]},
        ]
    }


def either_or_rules(dep: Deployment, *, pangu: bool) -> list[dict[str, Any]]:
    """Cross-field rules as JSON Schema proper, each an either/or of two cases: few enough that schema-driven
    generators (schemathesis) can still intersect them, so related rules share one entry."""
    no_tools = {"properties": {"tools": {"maxItems": 0}}}  # null or []
    tools = given("tools", minItems=1)
    stream_options_off = absent("stream_options")
    choice_free = {"properties": {"tool_choice": {"enum": ["none", "auto", None]}}}
    # No stop: null, or (where an empty list is allowed at all) []. A string is a stop whatever its length; and
    # under Pangu's strict limits a list has an item, so only null is left (an empty intersection would leave
    # schema-driven generators with nothing to build).
    no_stop = NULL if pangu and dep.pangu_strict else {"type": ["array", "null"], "maxItems": 0}
    if pangu:  # PANGU.3321: a Pangu stream carries one choice
        stream = either(
            "stream_options only with stream true; with stream, n is 1 (PANGU.3321).",
            {"allOf": [stream_is_false(pangu), stream_options_off]},
            {"allOf": [stream_is_true(pangu), {"properties": {"n": {"maximum": 1}}}]},
        )
    else:
        stream = either("stream_options only with stream true.", stream_options_off, stream_is_true(pangu))
    rules = [
        stream,
        either(
            "top_logprobs needs logprobs true or absent.",
            {"properties": {"logprobs": {"enum": [True, None]}}},
            absent("top_logprobs"),
        ),
        either(
            "sampler_logprobs needs logprobs true and top_logprobs of at least 1.",
            not_true("sampler_logprobs"),
            {"allOf": [is_("logprobs", True), given("top_logprobs", minimum=1)]},
        ),
        either("return_progress only with stream true.", not_true("return_progress"), stream_is_true(pangu)),
        either(
            "use_beam_search takes no stop and no json_object / json_schema response_format.",
            not_true("use_beam_search"),
            {"properties": {"stop": no_stop, "response_format": {"properties": {"type": {"const": "text"}}}}},
        ),  # null or text
    ]
    if dep.tools:
        rules.append(either("tool_choice 'required' or a named function needs tools.", choice_free, tools))
        # The logprobs half of "active tools take no n, best_of, beam search or logprobs" (x-refused-when has it
        # all): the one a schema-valid body met most often, so said as JSON Schema proper (without tools it is
        # implied: tools then need tool_choice 'none').
        rules.append(
            either(
                "Active tools (tool_choice not 'none') take no logprobs.",
                no_tools,
                is_("tool_choice", "none"),
                {"properties": {"logprobs": {"enum": [False, None]}, "top_logprobs": NULL}},
            )
        )
    else:
        rules.append(
            either(
                "This model calls no tools: tools need tool_choice 'none'; 'required' or a named function is refused.",
                {"allOf": [no_tools, choice_free]},
                is_("tool_choice", "none"),
            )
        )
    return rules


def refused_combinations(dep: Deployment, *, pangu: bool) -> list[dict[str, Any]]:
    """The rules over three fields or more (request.py `_cross_field_rules`, params.py's caps), as `x-refused-when`:
    a body that meets every part of one entry is refused. JSON Schema could say them as `not`, but intersecting
    that many `not`s outgrows what schema-driven generators such as schemathesis can build."""
    stream, no_stream = stream_is_true(pangu), stream_is_false(pangu)
    beam, not_beam = is_("use_beam_search", True), not_true("use_beam_search")
    multi = {"anyOf": [given("n", minimum=2), given("best_of", minimum=2)]}
    tools_active = {"allOf": [given("tools", minItems=1), {"not": is_("tool_choice", "none")}]}
    logprobs = {"anyOf": [is_("logprobs", True), given("top_logprobs")]}
    rules = [
        refused(
            "n or best_of above 1 needs a temperature above 0 (unless use_beam_search).",
            multi,
            not_beam,
            given("temperature", maximum=0),
        ),
        refused("stream with best_of needs n.", not_beam, stream, given("best_of"), absent("n")),
        refused(f"use_beam_search takes max_tokens up to {BEAM_MAX_TOKENS}.", beam, _max_tokens_above(BEAM_MAX_TOKENS)),
        refused("use_beam_search takes no sampler_logprobs.", beam, is_("sampler_logprobs", True)),
        refused(
            "continue_final_message needs add_generation_prompt false (and a final assistant message with text).",
            is_("continue_final_message", True),
            {"properties": {"add_generation_prompt": {"enum": [True, None]}}},
        ),
        refused(
            "Active tools (tool_choice not 'none') take no n, best_of above 1, beam search or logprobs.",
            tools_active,
            {"anyOf": [multi, beam, logprobs]},
        ),
        refused(
            "chat_template_kwargs.thinking_budget with enable_thinking takes no n, best_of above 1 or beam search.",
            given(
                "chat_template_kwargs",
                required=["thinking_budget", "enable_thinking"],
                properties={"thinking_budget": {"type": "integer"}, "enable_thinking": {"const": True}},
            ),
            {"anyOf": [multi, beam]},
        ),
    ]
    if pangu and dep.pangu_strict:  # an either/or over the messages too many for the generators: listed here
        tool_message = {
            "required": ["messages"],
            "properties": {"messages": {"contains": {"required": ["role"], "properties": {"role": {"const": "tool"}}}}},
        }
        rules.append(refused("A 'tool' message needs tools.", tool_message, {"properties": {"tools": {"maxItems": 0}}}))
    if dep.max_new_tokens > BEAM_MAX_TOKENS:
        rules.append(
            refused(
                f"use_beam_search needs max_tokens (the server default {dep.max_new_tokens} is above "
                f"{BEAM_MAX_TOKENS}).",
                beam,
                absent("max_completion_tokens"),
                absent("max_tokens"),
            )
        )
    if dep.max_n <= ENUMERATED_MAX_N:
        below = [{"allOf": [is_("n", k), given("best_of", maximum=k - 1)]} for k in range(2, dep.max_n + 1)]
        if below:
            rules.append(refused("Without stream, best_of must be at least n.", not_beam, no_stream, {"anyOf": below}))
        equal = [{"allOf": [is_("n", k), is_("best_of", k)]} for k in range(1, dep.max_n + 1)]
        rules.append(
            refused(
                "With stream, best_of must equal n.",
                not_beam,
                stream,
                given("best_of"),
                given("n"),
                {"not": {"anyOf": equal}},
            )
        )
    return rules


def tighten_request(schema: dict[str, Any], dep: Deployment, *, pangu: bool) -> None:
    """Field rules of one route's request schema that live in validators, server caps or the model."""
    props = schema["properties"]
    if "model" in schema.get("required", []):  # required: null (= absent) is refused
        props["model"] = {
            **props["model"]["anyOf"][0],
            "description": "The served model's name or a LoRA adapter id (GET /v1/models).",
        }
        if dep.model is not None:
            props["model"]["enum"] = [dep.model]
    for name, cap in (("n", 8192), ("best_of", 128)):
        props[name]["anyOf"][0]["maximum"] = min(cap, dep.max_n)
    props["n"]["description"] = f"At most the server's max_n ({dep.max_n}); above 1 only with a temperature above 0."
    stop_item = {"type": "string", "minLength": 1, "maxLength": 1024}
    props["stop"]["anyOf"][:2] = [stop_item, {"type": "array", "maxItems": 1024, "items": stop_item}]
    props["stop"]["description"] = "At most 32768 characters in all. Not with use_beam_search."
    template = props["chat_template"]["anyOf"][0]
    template["not"] = {"pattern": TEMPLATE_PATH}
    template["description"] = "Inline Jinja (at most 1 MiB); a value that looks like a file path is refused."
    kwargs = props["chat_template_kwargs"]
    kwargs["propertyNames"] = {"not": {"enum": list(RESERVED_TEMPLATE_KWARGS)}}
    kwargs["properties"] = {
        "enable_thinking": {"anyOf": [{"type": "boolean"}, NULL]},
        "thinking_budget": {"anyOf": [{"type": "integer", "minimum": 1, "maximum": INT32_MAX}, NULL]},
    }
    props["tools"]["anyOf"][0]["maxItems"] = MAX_TOOLS
    props["tools"]["description"] = (
        f"At most {MAX_TOOLS} tools with distinct names, nested at most {MAX_TOOLS_DEPTH} levels deep."
    )
    props["tool_choice"]["description"] = "A named function must be one of tools."
    props["messages"]["description"] = (
        f"At most {MAX_MEDIA_ITEMS} media parts in all; the prompt they make must fit the model's context."
    )
    if pangu and dep.pangu_strict:
        props["messages"]["maxItems"] = MAX_MESSAGES
        props["temperature"]["anyOf"][0] = {"type": "number", "exclusiveMinimum": 0, "maximum": 1}
        props["top_p"]["anyOf"][0]["maximum"] = 1  # (0, 1] within the shared (1e-6, 1.0]
        props["n"]["anyOf"][0]["maximum"] = min(2, dep.max_n)
        props["n"]["description"] = "1 or 2 without stream, 1 with stream."
        props["stop"]["anyOf"][1]["minItems"] = 1
        if dep.context_length:  # pangu.py checks the effective one (max_completion_tokens wins); both stay below
            for name in ("max_tokens", "max_completion_tokens"):
                props[name]["anyOf"][0]["maximum"] = dep.context_length
                props[name]["description"] = f"At most the model maximum {dep.context_length}."
    elif pangu:
        props["n"]["description"] = "Must be 1 when stream is true."
    schema["allOf"] = either_or_rules(dep, pangu=pangu)
    schema["x-refused-when"] = refused_combinations(dep, pangu=pangu)
