"""Sampling controls, presets, and the request body they build.

Each `Knob` is one request field of spec §2.2 with its range and meaning as help text. The UI reads its controls
through `request_fields`, which sends only what differs from the spec's default, so the request a user sees (and
copies as curl) is the short one the API would get from a careful client. `check` runs the API's own
`parse_chat_request`, so an invalid combination is explained in the API's words before anything is sent.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from engine.protocol.errors import RequestValidationError
from engine.protocol.request import parse_chat_request
from playground.client.tools_panel import json_error


@dataclass(frozen=True)
class Knob:
    name: str  # the request field (or a UI-only helper such as json_schema)
    kind: str  # slider | int | check | text | lines | choice | dropdown | code | pattern
    default: Any  # what the control starts at
    absent: Any  # the value that means "not sent" (the spec's default)
    help: tuple[str, str]  # (English, Chinese): its range and meaning; field names and values as the API spells them
    lo: float | None = None
    hi: float | None = None
    step: float | None = None
    choices: tuple[str, ...] = ()
    label: tuple[str, str] | None = None  # (English, Chinese) of a UI-only knob's label; else the field's name


SAMPLING = (
    Knob(
        "temperature",
        "slider",
        0.7,
        None,
        ("0 = greedy. Range [0, 2]; API default 1.", "0 = 贪心。范围 [0, 2]；API 默认 1。"),
        0.0,
        2.0,
        0.05,
    ),
    Knob(
        "top_p",
        "slider",
        1.0,
        1.0,
        ("Nucleus sampling; 1 = off. Range (1e-6, 1].", "核采样；1 = 关闭。范围 (1e-6, 1]。"),
        0.01,
        1.0,
        0.01,
    ),
    Knob(
        "top_k",
        "int",
        -1,
        -1,
        (
            "Keep the k likeliest; -1 or 0 = off. Range -1, 0, [1, 2³¹−1].",
            "只保留概率最高的 k 个；-1 或 0 = 关闭。范围 -1、0、[1, 2³¹−1]。",
        ),
        -1,
        2147483647,
    ),
    Knob(
        "min_p",
        "slider",
        0.0,
        0.0,
        (
            "Keep tokens at least min_p × the top token's probability; 0 = off. [0, 1].",
            "只保留概率不低于最高者的 min_p 倍的 token；0 = 关闭。范围 [0, 1]。",
        ),
        0.0,
        1.0,
        0.01,
    ),
    Knob(
        "presence_penalty",
        "slider",
        0.0,
        0.0,
        ("Discourage tokens already used; 0 = off. [-2, 2].", "抑制已出现过的 token；0 = 关闭。[-2, 2]。"),
        -2.0,
        2.0,
        0.1,
    ),
    Knob(
        "frequency_penalty",
        "slider",
        0.0,
        0.0,
        ("Grows with a token's count; 0 = off. [-2, 2].", "随 token 出现次数增大；0 = 关闭。[-2, 2]。"),
        -2.0,
        2.0,
        0.1,
    ),
    Knob(
        "repetition_penalty",
        "slider",
        1.0,
        1.0,
        (
            "On tokens seen in prompt or output; 1 = off. (0, 2].",
            "作用于提示或输出中出现过的 token；1 = 关闭。(0, 2]。",
        ),
        0.05,
        2.0,
        0.05,
    ),
    Knob(
        "seed",
        "text",
        "",
        "",
        (
            "Empty = random; the same seed reproduces a reply. Range [0, 2⁶⁴−1].",
            "留空 = 随机；相同的 seed 复现同一回复。范围 [0, 2⁶⁴−1]。",
        ),
    ),
)

LENGTH = (
    Knob(
        "max_tokens",
        "slider",
        256,
        None,
        (
            "Reasoning included; capped by the server. Range [1, 2³¹−1].",
            "包括推理部分；受服务器上限约束。范围 [1, 2³¹−1]。",
        ),
        1,
        2048,
        1,
    ),
    Knob(
        "stop",
        "lines",
        "",
        "",
        (
            "Stop strings, one per line (1..1024 chars); not with beam search.",
            "停止字符串，每行一个（1..1024 个字符）；不能与束搜索同用。",
        ),
    ),
    Knob(
        "stop_token_ids",
        "text",
        "",
        "",
        (
            "Comma-separated token ids; ids outside [0, 2³¹−1] are ignored.",
            "逗号分隔的 token id；超出 [0, 2³¹−1] 的 id 被忽略。",
        ),
    ),
    Knob(
        "include_stop_str_in_output",
        "check",
        False,
        False,
        ("Keep the matched stop at the end of the reply.", "在回复末尾保留匹配到的停止字符串。"),
    ),
    Knob(
        "ignore_eos",
        "check",
        False,
        False,
        ("Generate past end-of-sequence, up to max_tokens.", "越过序列结束符继续生成，直到 max_tokens。"),
    ),
    Knob(
        "skip_special_tokens", "check", True, True, ("Drop special tokens from the text.", "从文本中去掉特殊 token。")
    ),
)

CANDIDATES = (
    Knob(
        "n",
        "int",
        1,
        1,
        (
            "Replies; > 1 needs temperature > 0, no tools. Range [1, 8192] and ≤ max_n.",
            "回复条数；> 1 需要 temperature > 0 且不带工具。范围 [1, 8192] 且 ≤ max_n。",
        ),
        1,
        8192,
    ),
    Knob(
        "best_of",
        "int",
        0,
        0,
        ("0 = n; streaming needs best_of = n. Range [1, 128].", "0 = n；流式输出要求 best_of = n。范围 [1, 128]。"),
        0,
        128,
    ),
    Knob(
        "use_beam_search",
        "check",
        False,
        False,
        (
            "Width max(n, best_of); no stop strings; max_tokens ≤ 128.",
            "束宽 max(n, best_of)；不能有停止字符串；max_tokens ≤ 128。",
        ),
    ),
    Knob(
        "logprobs",
        "check",
        False,
        False,
        (
            "Each token's log-probability (the heatmap). Not with tools.",
            "每个 token 的对数概率（热力图）。不能与工具同用。",
        ),
    ),
    Knob(
        "top_logprobs",
        "slider",
        0,
        0,
        (
            "Alternatives per token (needs logprobs). Range [0, 20].",
            "每个 token 的候选数（需要 logprobs）。范围 [0, 20]。",
        ),
        0,
        20,
        1,
    ),
    Knob(
        "sampler_logprobs",
        "check",
        False,
        False,
        (
            "Extension: each token's candidates also after the samplers "
            "(logit_bias, penalties, constraints, temperature, top-k, top-p), beside the model's in the heatmap. Needs "
            "logprobs and top_logprobs ≥ 1.",
            "扩展字段：热力图中在模型的候选旁边，再列出经过采样器（logit_bias、惩罚、约束、temperature、top_k、top_p）之后的"
            "候选。需要 logprobs 且 top_logprobs ≥ 1。",
        ),
        label=("samplers before/after", "采样器前后对比"),
    ),
    Knob(
        "speculative",
        "choice",
        "server default",
        "server default",
        (
            "Extension: speculative decoding by prompt "
            "lookup (n-gram drafts); greedy replies are the same, accepted drafts are underlined in the heatmap. Server "
            "default: greedy requests draft (--speculative-ngram), sampled ones do not.",
            "扩展字段：提示查找（多元组草稿）推测解码；贪心回复不变，被接受的草稿在热力图中加下划线。"
            "服务器默认：贪心请求起草，采样请求不起草（由服务器启动参数决定）。",
        ),
        choices=("server default", "on", "off"),
        label=("speculative (n-gram drafts)", "推测解码（多元组草稿）"),
    ),
)

FORMATS = ("none", "JSON schema", "choice list", "regex", "grammar")
FORMAT = (
    Knob(
        "format",
        "dropdown",
        "none",
        "none",
        (
            "Extension (vLLM's structured_outputs): the reply is kept inside a JSON "
            "schema, one of a list of choices, a regex (matched fully) or a grammar (Lark or GBNF), by constrained "
            "decoding. One kind per request (not with response_format).",
            "扩展字段（vLLM 的 structured_outputs）：用约束解码把回复限制在 JSON schema、若干选项之一、正则表达式"
            "（完整匹配）或文法（Lark 或 GBNF）之内。每个请求只能有一种（不能与 response_format 同用）。",
        ),
        choices=FORMATS,
        label=("Format", "格式"),
    ),
    Knob(
        "format_pattern",
        "pattern",
        "",
        "",
        (
            "For Format: the JSON schema, the choices one per line, the regex or the grammar.",
            "用于「输出格式」：JSON schema、每行一个选项、正则表达式或文法。",
        ),
        label=("pattern", "模式"),
    ),
    Knob(
        "response_format",
        "choice",
        "text",
        "text",
        (
            "json_object = any JSON object; json_schema = JSON matching the "
            "schema below. Enforced by constrained decoding.",
            "json_object = 任意 JSON 对象；json_schema = 符合下方 schema 的 JSON。由约束解码保证。",
        ),
        choices=("text", "json_object", "json_schema"),
    ),
    Knob(
        "json_schema",
        "code",
        "",
        "",
        (
            'For json_schema: {"name": "...", "schema": {...}} (types string, integer, '
            "number, boolean, array, object, null).",
            '用于 json_schema：{"name": "...", "schema": {...}}（类型 string、integer、number、boolean、array、'
            "object、null）。",
        ),
    ),
)

THINKING = (
    Knob(
        "enable_thinking",
        "choice",
        "model default",
        "model default",
        (
            "chat_template_kwargs.enable_thinking: a reasoning model's thinking mode.",
            "chat_template_kwargs.enable_thinking：推理模型的思考模式。",
        ),
        choices=("model default", "on", "off"),
        label=("thinking", "思考模式"),
    ),
    Knob(
        "thinking_budget",
        "int",
        0,
        0,
        (
            "chat_template_kwargs.thinking_budget: most reasoning tokens; 0 = none. Range [1, 2³¹−1].",
            "chat_template_kwargs.thinking_budget：推理 token 的上限；0 = 不限。范围 [1, 2³¹−1]。",
        ),
        0,
        2147483647,
    ),
)

KNOBS = SAMPLING + LENGTH + CANDIDATES + FORMAT + THINKING
BY_NAME = {k.name: k for k in KNOBS}
INTEGER_FIELDS = {"top_k", "max_tokens", "n", "best_of", "top_logprobs", "thinking_budget"}

PRESETS: dict[str, dict[str, Any]] = {
    "Precise (greedy)": {
        "temperature": 0.0,
        "top_p": 1.0,
        "top_k": -1,
        "presence_penalty": 0.0,
        "frequency_penalty": 0.0,
        "repetition_penalty": 1.0,
    },
    "Balanced": {
        "temperature": 0.7,
        "top_p": 0.9,
        "top_k": 50,
        "presence_penalty": 0.0,
        "frequency_penalty": 0.0,
        "repetition_penalty": 1.05,
    },
    "Creative": {
        "temperature": 1.1,
        "top_p": 0.95,
        "top_k": -1,
        "presence_penalty": 0.4,
        "frequency_penalty": 0.2,
        "repetition_penalty": 1.0,
    },
}
PRESET_FIELDS = tuple(PRESETS["Balanced"])

# Below this many parameters a model answers best greedily: sampled at 0.7, the bundled 135M SmolLM2 named Paris
# as France's capital in 5 of 10 tries and rambled to the length limit (issue 30; bench/demo_answers.py).
SMALL_MODEL = 1_000_000_000
# The model's generation config fields the page's controls mirror (transformers' names are the API's).
GENERATION_FIELDS = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty")


def model_defaults(parameters: int, generation_config: dict[str, Any]) -> tuple[str | None, dict[str, Any]]:
    """The page's starting preset and knob values for a model: a small model starts on "Precise (greedy)" with a
    short reply budget; a larger one on its own generation config (`do_sample: false` = greedy) over "Balanced"."""
    if parameters and parameters < SMALL_MODEL:
        return "Precise (greedy)", {**PRESETS["Precise (greedy)"], "max_tokens": 192}
    values = {**PRESETS["Balanced"], "max_tokens": 512}
    own = {f: generation_config[f] for f in GENERATION_FIELDS if isinstance(generation_config.get(f), int | float)}
    if generation_config.get("do_sample") is False:
        return "Precise (greedy)", {**values, **PRESETS["Precise (greedy)"]}
    if not own:
        return "Balanced", values
    values.update(own)
    if "top_k" in own and not own["top_k"]:
        values["top_k"] = -1
    return None, values


def _integral(value: Any) -> Any:
    """Sliders and number boxes hand back 128.0; the API is strict about integers, so make whole floats ints."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _typed(text: str) -> Any:
    """A typed-in scalar as the JSON value it reads as, so a bad one gets the API's own message."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def request_fields(values: dict[str, Any], lang: str = "en") -> dict[str, Any]:
    """Control values (by knob name) -> request fields, leaving out every field at its spec default.

    Raises RequestValidationError when a box holds text that cannot become a field at all (broken JSON), its
    message in `lang`."""
    out: dict[str, Any] = {}
    for name, value in values.items():
        knob = BY_NAME.get(name)
        if knob is None or name in (
            "response_format",
            "json_schema",
            "enable_thinking",
            "thinking_budget",
            "speculative",
            "format",
            "format_pattern",
        ):
            continue
        if name in INTEGER_FIELDS:
            value = _integral(value)
        if value is None or value == knob.absent:
            continue
        if name == "seed":
            out["seed"] = _typed(value.strip())
        elif name == "stop":
            lines = [line for line in value.split("\n") if line]
            if lines:
                out["stop"] = lines
        elif name == "stop_token_ids":
            out["stop_token_ids"] = [_typed(t.strip()) for t in value.split(",") if t.strip()]
        elif name == "top_logprobs":
            if values.get("logprobs"):
                out["top_logprobs"] = value
        else:
            out[name] = value
    if "include_stop_str_in_output" in out and not ("stop" in out or "stop_token_ids" in out):
        del out["include_stop_str_in_output"]  # ignored by the API then; keep the request honest
    if values.get("speculative") in ("on", "off"):  # "server default" sends nothing
        out["speculative"] = values["speculative"] == "on"
    out.update(_format(values.get("response_format") or "text", values.get("json_schema") or "", lang))
    out.update(structured_outputs(values.get("format") or "none", values.get("format_pattern") or ""))
    kwargs = _thinking(values.get("enable_thinking") or "model default", _integral(values.get("thinking_budget") or 0))
    if kwargs:
        out["chat_template_kwargs"] = kwargs
    return out


def _format(kind: str, schema_text: str, lang: str = "en") -> dict[str, Any]:
    if kind == "text":
        return {}
    if kind == "json_schema":
        try:
            schema = json.loads(schema_text)
        except ValueError as exc:
            if lang == "zh":
                raise RequestValidationError(f"json_schema 框中不是有效的 JSON：{_where(exc, lang)}。") from None
            raise RequestValidationError(f"The JSON schema box is not valid JSON: {_where(exc)}.") from None
        return {"response_format": {"type": "json_schema", "json_schema": schema}}
    return {"response_format": {"type": kind}}


def structured_outputs(kind: str, text: str) -> dict[str, Any]:
    """The Format control -> the API's `structured_outputs` (nothing for "none"). The box's text goes as it is (a
    JSON schema that does not parse goes as text), so a bad pattern gets the server's own 422 message."""
    if kind == "choice list":
        return {"structured_outputs": {"choice": [line for line in text.split("\n") if line.strip()]}}
    if kind == "JSON schema":
        try:
            return {"structured_outputs": {"json": json.loads(text)}}
        except ValueError:
            return {"structured_outputs": {"json": text}}
    if kind in ("regex", "grammar"):
        return {"structured_outputs": {kind: text}}
    return {}


def _where(exc: ValueError, lang: str = "en") -> str:
    if isinstance(exc, json.JSONDecodeError):
        return json_error(exc, lang)
    return str(exc)


def _thinking(mode: str, budget: int) -> dict[str, Any]:
    kwargs: dict[str, Any] = {}
    if mode != "model default":
        kwargs["enable_thinking"] = mode == "on"
    if budget:
        kwargs["thinking_budget"] = budget
    return kwargs


def build_body(
    model: str,
    messages: list[dict[str, Any]],
    fields: dict[str, Any],
    tools: list[dict[str, Any]] | None = None,
    tool_choice: Any = None,
) -> dict[str, Any]:
    """The exact /v1/chat/completions body the UI sends (always streamed, usage included)."""
    body: dict[str, Any] = {
        "model": model,
        "messages": messages,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    body.update(fields)
    if tools:
        body["tools"] = tools
        if tool_choice not in (None, "auto"):
            body["tool_choice"] = tool_choice
    return body


def check(body: dict[str, Any]) -> str | None:
    """The API's validation message for this body, or None when it would be accepted."""
    try:
        parse_chat_request(body)
    except RequestValidationError as exc:
        return exc.message
    return None
