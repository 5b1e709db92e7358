"""What the empty chat offers: example prompts the served model answers well, in the page's language, and one honest
line on how to bring a bigger model.

The prompts are chosen per kind of model, from what the page already knows of it (capabilities.py): the tiny
reasoning and tool demo gets the flows it was trained on, a base model on the plain template gets text to continue,
the bundled SmolLM2 (English only, 135 M parameters) gets questions `bench/demo_answers.py` shows it answers, and any
other chat model general prompts in the page's language.
"""

from __future__ import annotations

from typing import Any

from playground.page.capabilities import capabilities
from playground.page.i18n import say

Pair = tuple[str, str]  # (English, Chinese)

SMALL_ENGLISH = (
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "Give me three tips for a good night's sleep.",
    "What is the chemical formula of water?",
)
CHAT: tuple[Pair, ...] = (
    ("Explain what a black hole is in two sentences.", "用两句话解释什么是黑洞。"),
    ("Write a haiku about the sea.", "写一首关于大海的俳句。"),
    ("Give me three tips for a good night's sleep.", "给我三条睡个好觉的建议。"),
    ("Translate 'good morning' into French and Spanish.", "把“早上好”翻译成法语和西班牙语。"),
)
BASE: tuple[Pair, ...] = (
    ("The capital of France is", "The capital of France is"),
    ("Once upon a time, in a small village by the sea,", "Once upon a time, in a small village by the sea,"),
    ("def fibonacci(n):", "def fibonacci(n):"),
)
DEMO = ("What is 2+2?", "Weather in Paris?")  # the flows demo_models/tiny_qwen.py was trained on
DEMO_TOOL = ("Weather in Paris? (with get_weather from the Tools tab)", "Weather in Paris?（配合工具页的 get_weather）")

SMALL = 1_000_000_000  # below this a model is treated as English-only and small (SmolLM2-135M)
ASK = ("**Ask {name}**, or start from an example.", "**向 {name} 提问**，或从示例开始。")
ENGLISH_ONLY = (
    "{name} is a small English-only model: ask it in English.",
    "{name} 是一个只懂英语的小模型：请用英语提问。",
)
BASE_NOTE = (
    "{name} is a base model: it continues your text rather than answering it.",
    "{name} 是基础模型：它接着你的文本往下写，而不是回答问题。",
)
BIGGER = (
    "A bigger model: start the server with `python app.py --model DIR` (a Hugging Face checkpoint) or "
    "`--model FILE.gguf`, or point the **Backend** tab at a running vLLM or MindIE server.",
    "更大的模型：用 `python app.py --model 目录`（Hugging Face 检查点）或 `--model 文件.gguf` 启动服务器，"
    "或在 **后端** 标签页连接一个正在运行的 vLLM 或 MindIE 服务器。",
)


def examples(service: Any, lang: str = "en") -> list[dict[str, str]]:
    """The Chatbot's example messages for this model (`[{"text": ...}]`); none while no model is loaded."""
    if service is None:
        return []
    model, can = service.model, capabilities(service)
    if getattr(model, "plain_template", False):
        texts = [say(pair, lang) for pair in BASE]
    elif can["tools"] and can["reasoning"] and _small(model):
        texts = list(DEMO)
    elif _small(model):
        texts = list(SMALL_ENGLISH)
    else:
        texts = [say(pair, lang) for pair in CHAT]
    shown = {DEMO[1]: say(DEMO_TOOL, lang)}  # the tool call needs the tool: said on the example itself
    return [{"text": text, "display_text": shown.get(text, text)} for text in texts]


def placeholder(service: Any, lang: str = "en") -> str:
    """The empty chat's text (markdown): what to do first, what this model is, and how to bring a bigger one."""
    if service is None:
        return ""
    name = service.served_name
    lines = [say(ASK, lang, name=name)]
    if getattr(service.model, "plain_template", False):
        lines.append(say(BASE_NOTE, lang, name=name))
    elif _small(service.model) and not capabilities(service)["reasoning"] and lang == "zh":
        lines.append(say(ENGLISH_ONLY, lang, name=name))
    lines.append(say(BIGGER, lang))
    return "\n\n".join(lines)


def _small(model: Any) -> bool:
    parameters = int(getattr(model, "parameters", 0) or 0)
    return 0 < parameters < SMALL
