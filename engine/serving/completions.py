"""Legacy completions (/v1/completions) on the one chat path: each prompt becomes a chat request that carries its
token ids (no template, no reasoning split) and runs through `RequestPolicy.run` as a chat request does
(admission, the per-client limit, moderation of what the prompt reads, timeouts, metrics, the access line).

The prompts of a request run one after the other, so a request holds one engine slot and one place under the
per-client limit at a time; `CompletionStream` hands out their chunks as one stream, each choice re-indexed
(prompt i's choices are i*n .. i*n+n-1, as vLLM numbers them), and ends it with one usage chunk for them all. A
non-stream answer is `fold` of that stream, as on the chat route.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from engine.protocol.completions import CompletionRequest
from engine.protocol.errors import RequestValidationError
from engine.protocol.request import ChatCompletionRequest, parse_chat_request
from engine.protocol.response import ChatCompletionChunk, PromptTokensDetails, Usage
from engine.serving.policy import CallContext, PolicedRun, RequestPolicy
from engine.serving.service import ChatService


@dataclass
class Prompt:
    request: ChatCompletionRequest  # the chat request it runs as
    ids: list[int]  # its tokens as the model sees them
    text: str  # what `echo` writes in front of the completion
    tokens: list[str] = field(default_factory=list)  # each token's text, for `echo` with `logprobs`


def prompts_for(creq: CompletionRequest, svc: ChatService) -> list[Prompt]:
    """Tokenize each prompt (text with the tokenizer's own special tokens, as vLLM: add_special_tokens=True; token
    ids as they are, each inside the vocabulary) and build its chat request. Blocking: run it in a thread."""
    tok = svc.tokenizer
    vocab = len(tok)
    body = creq.chat_body()
    out = []
    for i, prompt in enumerate(creq.prompts):
        where = "prompt" if len(creq.prompts) == 1 else f"prompt[{i}]"
        if isinstance(prompt, str):
            ids, text = list(tok(prompt, add_special_tokens=True)["input_ids"]), prompt
        else:
            for j, t in enumerate(prompt):
                if t >= vocab:
                    raise RequestValidationError(
                        f"{where}[{j}] must be a token id below the vocabulary size {vocab}, got {t}."
                    )
            ids, text = prompt, tok.decode(prompt)
        # The chat request's messages only say what the prompt reads (the moderation hook, the access line).
        req = parse_chat_request({**body, "messages": [{"role": "user", "content": text or " "}]})
        req._prompt_ids = ids
        tokens = [svc.formatter.token(t, False)[0] for t in ids] if creq.echo and creq.logprobs is not None else []
        out.append(Prompt(req, ids, text, tokens))
    return out


class CompletionStream:
    """The chunks of a request's prompts as one stream: prompt 0's run (started by the caller, so that a refusal
    is its error status), then each later prompt's, started through the policy when the one before has ended."""

    def __init__(
        self,
        policy: RequestPolicy,
        ctx: CallContext,
        prompts: list[Prompt],
        n: int,
        first: PolicedRun,
        access: dict[str, Any] | None,
    ) -> None:
        self.policy, self.ctx, self.prompts, self.n = policy, ctx, prompts, n
        self.current: PolicedRun | None = first
        self.access = access  # the caller's access line (HTTP); None: the policy writes one per prompt
        self.prompt_logprobs: dict[int, list[Any]] = {}  # by prompt, as the engine's first chunk carried them
        self._closed = False
        self._aborted = False  # the client left: no later prompt starts

    @property
    def prompt_tokens(self) -> int:
        return sum(len(p.ids) for p in self.prompts)

    def abort(self) -> None:
        self._aborted = True
        if self.current is not None:
            self.current.abort()

    def close(self) -> None:
        self._closed = True
        if self.current is not None:
            self.current.close()

    async def __aiter__(self) -> AsyncIterator[ChatCompletionChunk]:
        finals: list[ChatCompletionChunk] = []
        finishes: list[str] = []
        head: ChatCompletionChunk | None = None
        for i, prompt in enumerate(self.prompts):
            if self._closed:
                return
            if self._aborted:  # the usage of the prompts that ran still closes the stream
                break
            run = self.current if i == 0 else await self.policy.run(prompt.request, self.ctx, self.access)
            assert run is not None
            self.current = run
            if self._aborted:  # it left while this prompt was starting
                run.abort()
            try:
                async for chunk in run:
                    if head is None:
                        head = chunk
                    if not chunk.choices:
                        if chunk.usage is not None:
                            finals.append(chunk)
                        continue
                    for c in chunk.choices:
                        c.index += i * self.n
                    if chunk.prompt_logprobs is not None:
                        self.prompt_logprobs[i] = chunk.prompt_logprobs
                    chunk.id, chunk.created = head.id, head.created
                    yield chunk
            finally:
                run.close()
            finishes += (self.access or {}).get("finish_reasons", [])
        if head is None or not finals:  # left before its first prompt ran: nothing to sum
            return
        final = _merge(head, finals)
        if len(self.prompts) > 1 and final.usage is not None and self.access is not None:
            self.access.update(
                id=head.id,  # the response's id (each prompt's run wrote its own)
                finish_reasons=finishes,
                prompt_tokens=final.usage.prompt_tokens,
                completion_tokens=final.usage.completion_tokens,
                prompts=len(self.prompts),
            )
        yield final


def _merge(head: ChatCompletionChunk, finals: list[ChatCompletionChunk]) -> ChatCompletionChunk:
    """One usage chunk for every prompt: token counts summed; the per-token lists (`batch_size`,
    `queue_wait_time`, `prefill_time`, `decode_time_arr`) of the prompt with the longest choice, as chat does for
    n > 1 with its choices."""
    if len(finals) == 1:
        only = finals[0]
        only.id, only.created = head.id, head.created
        return only
    usages = [f.usage for f in finals if f.usage is not None]
    longest = max(finals, key=lambda f: len(f.usage.batch_size) if f.usage else 0)
    assert longest.usage is not None
    cached = sum(u.prompt_tokens_details.cached_tokens for u in usages)
    usage = Usage(
        prompt_tokens=sum(u.prompt_tokens for u in usages),
        prompt_tokens_details=PromptTokensDetails(cached_tokens=cached),
        completion_tokens=sum(u.completion_tokens for u in usages),
        total_tokens=sum(u.total_tokens for u in usages),
        batch_size=list(longest.usage.batch_size),
        queue_wait_time=list(longest.usage.queue_wait_time),
    )
    spec = [u.speculative for u in usages if u.speculative is not None]
    if spec:
        usage.speculative = {k: sum(s[k] for s in spec) for k in ("drafted", "accepted")}
    moderation = next((f.moderation_result for f in finals if f.moderation_result is not None), None)
    return ChatCompletionChunk(
        id=head.id,
        created=head.created,
        model=head.model,
        choices=[],
        usage=usage,
        prefill_time=longest.prefill_time,
        decode_time_arr=longest.decode_time_arr,
        moderation_result=moderation,
    )
