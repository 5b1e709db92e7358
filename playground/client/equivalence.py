"""Cross-backend equivalence (issue 21, point 3): does a remote server (MindIE, vLLM, another build of this app)
render and answer a request the way the embedded engine does?

One request goes to two backends with greedy settings and log-probabilities. For each side: the rendered prompt's
token ids (through the backend's /tokenize, `ChatBackend.tokenize`; where a backend has none, only the reply's
`prompt_tokens` count), the reply's tokens (their bytes, which every OpenAI-compatible logprobs entry carries,
so the sides compare without sharing a tokenizer), and each token's logprob. The verdict:

- "identical": the same prompt tokens (where both are known) and the same reply tokens (the token a stopped reply
  ends on counts as the end, however the server spells it: "" here, "<|im_end|>" in vLLM);
- "same text, different tokens": the replies read the same but were cut into other tokens;
- "diverges at N": the first reply token (0-based) where they differ, with both sides' tokens there;
- "prompts differ at N": the rendered prompts differ (then the replies are not comparable token for token).

Per-token logprob differences over the common prefix say how close two builds are even when they agree.
`compare_set` runs a whole prompt set (one row per prompt, a DataFrame for notebooks); bench/equivalence.py runs
it against any URL.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from engine.protocol.errors import ApiError
from playground.client.backend import ChatBackend, Messages, as_messages, run_sync
from playground.client.result import ChatResult

GREEDY = {"temperature": 0, "logprobs": True, "top_logprobs": 1}


@dataclass
class SideReport:
    label: str
    prompt_ids: list[int] | None  # None: the backend has no /tokenize
    prompt_tokens: int | None  # from the reply's usage
    tokens: list[str]  # the reply's tokens as their text
    token_bytes: list[bytes]
    logprobs: list[float]
    text: str
    finish_reason: str | None
    error: str | None = None


@dataclass
class Verdict:
    verdict: str  # identical | same text, different tokens | diverges at N | prompts differ at N | error
    diverge_at: int | None  # first reply token that differs (None: none does)
    prompt_diverge_at: int | None  # first prompt token that differs, where both sides have /tokenize
    a: SideReport
    b: SideReport
    logprob_diffs: list[float] = field(default_factory=list)  # |a - b| per token of the common prefix

    @property
    def identical(self) -> bool:
        return self.verdict == "identical"

    @property
    def max_logprob_diff(self) -> float | None:
        return max(self.logprob_diffs) if self.logprob_diffs else None

    def row(self) -> dict[str, Any]:
        """One line of a prompt set's table."""
        at = self.diverge_at
        return {
            "verdict": self.verdict,
            "diverge_at": at,
            "prompt_diverge_at": self.prompt_diverge_at,
            "prompt_tokens_a": self.a.prompt_tokens,
            "prompt_tokens_b": self.b.prompt_tokens,
            "tokens_a": len(self.a.tokens),
            "tokens_b": len(self.b.tokens),
            "token_a": self.a.tokens[at] if at is not None and at < len(self.a.tokens) else None,
            "token_b": self.b.tokens[at] if at is not None and at < len(self.b.tokens) else None,
            "max_logprob_diff": self.max_logprob_diff,
            "text_a": self.a.text,
            "text_b": self.b.text,
            "error": self.a.error or self.b.error,
        }

    def as_json(self) -> dict[str, Any]:
        out = asdict(self)
        for side in ("a", "b"):
            out[side]["token_bytes"] = [list(b) for b in out[side]["token_bytes"]]
        return out


def first_difference(a: list[Any], b: list[Any]) -> int | None:
    """The first index where the sequences differ (the shorter one's end when one is a prefix of the other); None
    when they are equal."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


async def _side(backend: ChatBackend, label: str, messages: list[dict[str, Any]], params: dict[str, Any]) -> SideReport:
    body = {"model": backend.model, "messages": messages}
    for key in ("chat_template", "chat_template_kwargs", "tools", "tool_choice"):  # what the prompt renders from
        if params.get(key) is not None:
            body[key] = params[key]
    ids: list[int] | None = None
    try:
        answer = await backend.tokenize(body)
        ids = list(answer["tokens"]) if answer else None
        result = await backend.achat(messages, **{**params, **GREEDY, "top_logprobs": params.get("top_logprobs", 1)})
    except ApiError as exc:
        return SideReport(label, ids, None, [], [], [], "", None, exc.message)
    return _report(label, ids, result)


def _report(label: str, ids: list[int] | None, result: ChatResult) -> SideReport:
    entries = result.logprobs
    usage = result.usage
    return SideReport(
        label,
        ids,
        usage.prompt_tokens if usage is not None else None,
        [e.token for e in entries],
        [bytes(e.bytes) if e.bytes else e.token.encode() for e in entries],
        [e.logprob for e in entries],
        result.reply,
        result.finish_reason,
    )


END = b"\0end"  # a reply's closing token when it stopped: EOS is "" on one server and "<|im_end|>" on another


def _keys(side: SideReport) -> list[bytes]:
    """The reply's tokens as compared: their bytes, with the token a stopped reply ended on as one END mark, since
    servers spell a skipped special token differently (this one as "", vLLM by its name) though it is the same."""
    if side.finish_reason == "stop" and side.token_bytes:
        return [*side.token_bytes[:-1], END]
    return side.token_bytes


def judge(a: SideReport, b: SideReport) -> Verdict:
    if a.error or b.error:
        return Verdict("error", None, None, a, b)
    prompt_at = first_difference(a.prompt_ids, b.prompt_ids) if a.prompt_ids and b.prompt_ids else None
    counted = a.prompt_tokens is not None and b.prompt_tokens is not None and not (a.prompt_ids and b.prompt_ids)
    if prompt_at is None and counted and a.prompt_tokens != b.prompt_tokens:
        prompt_at = min(a.prompt_tokens, b.prompt_tokens)  # type: ignore[type-var]  # counts only: the shorter's end
    at = first_difference(_keys(a), _keys(b))
    common = len(a.logprobs) if at is None else at
    diffs = [abs(x - y) for x, y in zip(a.logprobs[:common], b.logprobs[:common]) if math.isfinite(x - y)]
    if prompt_at is not None:
        verdict = f"prompts differ at {prompt_at}"
    elif at is None:
        verdict = "identical"
    elif b"".join(_keys(a)) == b"".join(_keys(b)):
        verdict = "same text, different tokens"
    else:
        verdict = f"diverges at {at}"
    return Verdict(verdict, at, prompt_at, a, b, diffs)


async def acompare(
    a: ChatBackend,
    b: ChatBackend,
    messages: Messages,
    *,
    max_tokens: int = 32,
    a_params: dict[str, Any] | None = None,
    b_params: dict[str, Any] | None = None,
    **params: Any,
) -> Verdict:
    """One request on both backends, greedy with logprobs (`params` for both; `a_params` / `b_params` for one
    side), side by side; both run at once."""
    msgs = as_messages(messages)
    common = {"max_tokens": max_tokens, **params}
    left, right = await asyncio.gather(
        _side(a, "a", msgs, {**common, **(a_params or {})}), _side(b, "b", msgs, {**common, **(b_params or {})})
    )
    return judge(left, right)


def compare(a: ChatBackend, b: ChatBackend, messages: Messages, **kw: Any) -> Verdict:
    return run_sync(acompare(a, b, messages, **kw))


async def acompare_set(
    a: ChatBackend, b: ChatBackend, prompts: Iterable[Messages], *, concurrency: int = 4, **kw: Any
) -> list[Verdict]:
    """Every prompt of a set on both backends (at most `concurrency` prompts in flight), in order."""
    gate = asyncio.Semaphore(concurrency)

    async def one(messages: Messages) -> Verdict:
        async with gate:
            return await acompare(a, b, messages, **kw)

    return list(await asyncio.gather(*(one(m) for m in prompts)))


def compare_set(a: ChatBackend, b: ChatBackend, prompts: Iterable[Messages], **kw: Any) -> Any:
    """A prompt set's verdicts as a DataFrame, one row per prompt (pandas: the notebooks' table)."""
    import pandas as pd

    verdicts = run_sync(acompare_set(a, b, list(prompts), **kw))
    return pd.DataFrame([{"prompt": _title(p), **v.row()} for p, v in zip(prompts, verdicts)])


def summary(verdicts: list[Verdict]) -> dict[str, Any]:
    """How a set went: counts per verdict kind and the largest logprob difference over the agreeing prefixes."""
    kinds: dict[str, int] = {}
    for v in verdicts:
        kind = v.verdict.split(" at ")[0]
        kinds[kind] = kinds.get(kind, 0) + 1
    diffs = [v.max_logprob_diff for v in verdicts if v.max_logprob_diff is not None]
    return {"prompts": len(verdicts), **kinds, "max_logprob_diff": max(diffs) if diffs else None}


def _title(messages: Messages) -> str:
    msgs = as_messages(messages)
    text = str(msgs[-1].get("content", "")) if msgs else ""
    return text[:60]
