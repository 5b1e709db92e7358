"""Branches (issue 19, point 5): a click on one of a token's alternatives (the heatmap's popover,
playground/page/static/tokens.js) continues the reply from there, as a new version of that turn.

The branch keeps the reply's text before the token, puts the chosen alternative in its place, and asks for the rest
with the original request's own settings: its messages plus that text as an open final assistant message
(`continue_final_message`, vLLM's extension, which this server and vLLM take), `max_tokens` less the tokens kept, so
a branch that takes the original token (greedy) reproduces the original reply. The text is rebuilt from the tokens'
bytes, which the logprobs carry, so it is exact for byte-level vocabularies (Llama 3, Qwen, SmolLM2). On the embedded
engine the prefix comes from the prefix cache (the stats' cached tokens say how much).

The new reply starts with the kept text and its tokens' logprobs (so a branch of a branch points at the same
positions) and counts only what it generated in its own statistics.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from engine.protocol.response import LogprobEntry
from playground.client.reply import ChoiceView, ReplyView
from playground.client.say import say

NOT_THERE = ("that token is no longer there to branch from.", "那个 token 已不在，无法从它分支。")
REASONING = (
    "a branch starts from a token of the answer, not of the reasoning.",
    "分支只能从回答的 token 开始，不能从思考过程开始。",
)
TOOL_CALLS = ("a reply with tool calls cannot be branched.", "含有工具调用的回复不能分支。")
NO_TEXT = ("that alternative has no text to continue from (a special token).", "该候选没有可继续的文本（特殊 token）。")


@dataclass
class Branch:
    body: dict[str, Any]  # the request that continues the reply
    reply: ReplyView  # the new version's reply, holding the kept text and tokens so far
    at: int  # the token's position in the reply
    was: str  # the token the reply had there
    now: str  # the alternative taken instead


def parse(action: str) -> tuple[int, int, int, int] | None:
    """`branch:<turn>:<choice>:<pos>:<alt>[:<nonce>]` (written by tokens.js) -> (turn, choice, pos, alt)."""
    parts = (action or "").split(":")
    if len(parts) < 5 or parts[0] != "branch" or not all(p.isdigit() for p in parts[1:5]):
        return None
    turn, choice, pos, alt = (int(p) for p in parts[1:5])
    return turn, choice, pos, alt


def plan(
    request: dict[str, Any] | None, reply: ReplyView | None, choice: int, pos: int, alt: int, lang: str = "en"
) -> Branch | str:
    """The branch from token `pos` of `choice`, taking alternative `alt`; or why there is none (a message)."""
    c = reply.choices.get(choice) if reply is not None else None
    if request is None or reply is None or c is None or not 0 <= pos < len(c.logprobs):
        return say(NOT_THERE, lang)
    entry = c.logprobs[pos]
    if not 0 <= alt < len(entry.top_logprobs):
        return say(NOT_THERE, lang)
    if c.tool_calls:
        return say(TOOL_CALLS, lang)
    start = c.answer_at or 0
    if (c.reasoning_part or c.reasoning) and pos < start:
        return say(REASONING, lang)
    taken = entry.top_logprobs[alt]
    if not taken.bytes:
        return say(NO_TEXT, lang)
    kept = c.logprobs[start:pos]
    text = b"".join(bytes(e.bytes) for e in kept + [taken]).decode("utf-8", errors="replace")
    body = copy.deepcopy(request)
    body["messages"] = [*body["messages"], {"role": "assistant", "content": text}]
    body["continue_final_message"], body["add_generation_prompt"] = True, False
    for key in ("n", "best_of"):  # one path from the token on
        body.pop(key, None)
    for key in ("max_tokens", "max_completion_tokens"):
        if isinstance(body.get(key), int):
            body[key] = max(1, body[key] - (pos + 1))
    seed = ReplyView(backend=reply.backend)
    chosen = LogprobEntry(token=taken.token, logprob=taken.logprob, bytes=taken.bytes, top_logprobs=entry.top_logprobs)
    seed.choices[0] = ChoiceView(0, content=text, logprobs=[*c.logprobs[:pos], chosen])
    seed.branched = {"at": pos, "was": entry.token, "now": taken.token}
    return Branch(body, seed, pos, entry.token, taken.token)
