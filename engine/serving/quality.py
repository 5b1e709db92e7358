"""The quality meter (issue 32): what serving a model at lower precision costs, token by token.

A reply's tokens are teacher-forced through the served model and through a full-precision copy of the same model
(one prefill of prompt + reply each, `SamplingParams.prompt_rows_from`: the engine keeps the log-softmax row that
predicts each reply token). Per token: the KL divergence KL(reference ‖ served) = Σ p_ref (log p_ref − log p_served)
of the two distributions at that position, and whether their top-1 tokens differ. Both sides are recomputed the
same way (a prefill), so the meter compares the two models, not a decode step with a prefill. A quantized model's
prefill runs the kernel its calibration picked for 16 rows and more (engine/core/quant.py SPLIT_ROWS), which may
differ from its decode kernel in float rounding (bf16 activations), never in the weights it multiplies.

The reference is the same model's `@fp32` precision entry (engine/model_registry.py PRECISIONS), offered to the
pool on first use and loaded like any model (an administrator's action once credentials are set). A served model
that already is full precision gets no meter: the report says so (`full_precision`) instead of a KL of zero.

`measure` is the entry point of every front end (the page, the notebooks): the model names go through the pool as
a chat request's do (503 while loading, 403 without the right to load), and the two prefills hold an admission
flight (the per-client limit, draining) under the request timeout; the engines refuse past `--max-queue`.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field
from typing import Any

import torch

from engine.core.types import EngineError, EngineRequest, SamplingParams
from engine.protocol.errors import RequestValidationError, ServiceUnavailableError
from engine.serving.generation import map_engine_error
from engine.serving.service import ChatService

REFERENCE = "fp32"  # the precision entry a served model is compared against
# The rows of one side held at once (float32 [reply tokens, vocab]): a longer reply is scored on its first tokens
# (SmolLM2's 49,152-wide vocabulary: 1,365 tokens; Gemma 3's 262,144: 256).
ROW_BYTES = 256 << 20
LOAD_WAIT_S = 600.0


@dataclass(frozen=True)
class TokenQuality:
    kl: float  # KL(reference ‖ served) at this token's position, in nats
    top: int  # the served model's most likely token there
    reference_top: int  # the reference's
    logprob: float = 0.0  # the reply token's, teacher-forced on the served model
    reference_logprob: float = 0.0  # and on the reference
    piece: str = ""  # the reply token's text
    reference_piece: str = ""  # the reference's top-1 token's text

    @property
    def differs(self) -> bool:
        return self.top != self.reference_top


@dataclass
class Quality:
    model: str
    reference: str
    precision: str  # what the served model's weights are ("Q4_1", "int4", "bf16", "fp32")
    reference_precision: str = REFERENCE
    tokens: list[TokenQuality] = field(default_factory=list)
    total: int = 0  # reply tokens; more than len(tokens) when the reply was longer than ROW_BYTES allows
    full_precision: bool = False  # the served model is full precision already: nothing to measure

    @property
    def agreement(self) -> float | None:
        """Share of scored tokens whose top-1 is the reference's."""
        return sum(not t.differs for t in self.tokens) / len(self.tokens) if self.tokens else None

    @property
    def mean_kl(self) -> float | None:
        return sum(t.kl for t in self.tokens) / len(self.tokens) if self.tokens else None

    def summary(self) -> str:
        """One line: "top-1 agreement 97.6% · mean KL 0.012 against fp32"."""
        if self.full_precision:
            return f"{self.model} is served at full precision ({self.precision}): no quantization to measure"
        if not self.tokens:
            return "no reply tokens to measure"
        line = f"top-1 agreement {self.agreement:.1%} · mean KL {self.mean_kl:.3g} against {self.reference_precision}"
        return line + (
            f" (first {len(self.tokens):,} of {self.total:,} tokens)" if len(self.tokens) < self.total else ""
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "reference": self.reference,
            "precision": self.precision,
            "reference_precision": self.reference_precision,
            "full_precision": self.full_precision,
            "total": self.total,
            "scored": len(self.tokens),
            "agreement": self.agreement,
            "mean_kl": self.mean_kl,
            "summary": self.summary(),
            "tokens": [
                {
                    "kl": t.kl,
                    "differs": t.differs,
                    "top": t.top,
                    "reference_top": t.reference_top,
                    "logprob": t.logprob,
                    "reference_logprob": t.reference_logprob,
                    "piece": t.piece,
                    "reference_piece": t.reference_piece,
                }
                for t in self.tokens
            ],
        }


def precision(svc: ChatService) -> str:
    """What a service's weights and matmuls are: the quantized form ("Q4_1", "int4"), else its float type ("bf16"
    where the lean runner's projections round to bf16 for torch's bf16 matmul, "fp32")."""
    runner = svc.engine.runner
    quantized = str(getattr(runner, "quantization", "none")).split(" x")[0]
    if quantized != "none":
        return quantized
    if getattr(runner, "bf16_matmul", False):
        return "bf16"
    dtype = getattr(runner, "dtype", torch.float32)
    return {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}.get(dtype, str(dtype))


def reference_id(model: str) -> str:
    """The reference entry of `model` (a precision entry's base, at REFERENCE)."""
    from engine.model_registry import PRECISIONS

    base, at, precision = model.rpartition("@")
    return f"{base if at and precision in PRECISIONS else model}@{REFERENCE}"


async def rows(svc: ChatService, ids: list[int], first: int) -> torch.Tensor:
    """float32 [len(ids) - first, vocab]: the log-softmax row predicting each of ids[first:] from the ones before,
    from one prefill of `ids` on `svc`'s engine (greedy, one token sampled and dropped)."""
    params = SamplingParams(
        temperature=0.0, max_tokens=1, ignore_eos=True, prompt_logprobs=0, prompt_rows_from=first, speculative=0
    )
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue = asyncio.Queue()
    request_id = "quality-" + uuid.uuid4().hex

    def sink(item: Any) -> None:
        try:
            loop.call_soon_threadsafe(queue.put_nowait, item)
        except RuntimeError:  # the caller's loop is closed: nobody reads this any more
            svc.engine.abort(request_id)

    try:
        stats = svc.engine.submit(EngineRequest(request_id, list(ids), params), sink)
    except EngineError as err:
        raise map_engine_error(err) from None
    try:
        while (item := await queue.get()) is not None:
            if isinstance(item, EngineError):
                raise map_engine_error(item)
    finally:
        svc.engine.abort(request_id)  # a no-op once finished; frees the slot when cancelled (timeout, client gone)
    out = torch.cat(stats.prompt_rows) if stats.prompt_rows else torch.empty(0, 0)
    if out.shape[0] != len(ids) - first:  # every row is wanted: a cached prefix or a preemption would skip some
        raise ServiceUnavailableError("The quality meter's prefill did not score every reply token; retry.")
    return out


def check_ids(svc: ChatService, prompt_ids: list[int], reply_ids: list[int]) -> None:
    vocab = svc.model.vocab_size or len(svc.tokenizer)
    if not prompt_ids or not reply_ids:
        raise RequestValidationError("The quality meter needs a prompt and a reply of at least one token each.")
    if any(not isinstance(t, int) or not 0 <= t < vocab for t in (*prompt_ids, *reply_ids)):
        raise RequestValidationError(f"The quality meter's token ids must be integers in [0, {vocab}).")
    if len(prompt_ids) + len(reply_ids) > svc.model.context_length:
        raise RequestValidationError(
            f"Prompt and reply ({len(prompt_ids) + len(reply_ids):,} tokens) exceed the model's context "
            f"({svc.model.context_length:,})."
        )


async def compare(
    served: ChatService, reference: ChatService, prompt_ids: list[int], reply_ids: list[int], reference_name: str = ""
) -> Quality:
    """The meter of `reply_ids` (after `prompt_ids`) on `served` against `reference` (already loaded)."""
    out = Quality(served.served_name, reference_name or reference.served_name, precision(served), precision(reference))
    out.total = len(reply_ids)
    if out.precision == "fp32":
        out.full_precision = True
        return out
    check_ids(served, prompt_ids, reply_ids)
    vocab = served.model.vocab_size or len(served.tokenizer)
    if (reference.model.vocab_size or len(reference.tokenizer)) != vocab:
        raise RequestValidationError("The reference model's vocabulary is not the served model's.")
    scored = reply_ids[: max(1, ROW_BYTES // (4 * vocab))]
    ids = [*prompt_ids, *scored]
    first = len(prompt_ids)
    ref, mine = await asyncio.gather(rows(reference, ids, first), rows(served, ids, first))
    kl = (ref.exp() * (ref - mine)).sum(-1).clamp_min(0.0)  # float32 rounding can dip a hair below zero
    tops, ref_tops = mine.argmax(-1).tolist(), ref.argmax(-1).tolist()
    at = torch.tensor(scored)[:, None]
    lps, ref_lps = mine.gather(1, at)[:, 0].tolist(), ref.gather(1, at)[:, 0].tolist()
    piece = lambda t: served.formatter.token(t, False)[0]  # noqa: E731
    out.tokens = [
        TokenQuality(float(k), int(t), int(r), lp, rlp, piece(tok), piece(r))
        for k, t, r, lp, rlp, tok in zip(kl.tolist(), tops, ref_tops, lps, ref_lps, scored)
    ]
    return out


async def measure(
    policy: Any, ctx: Any, model: str, prompt_ids: list[int], reply_ids: list[int], reference: str | None = None
) -> Quality:
    """The meter of a reply of `model` through the deployment's policy (engine/serving/policy.py RequestPolicy):
    `model` must be loaded; the reference (default: `reference_id(model)`, offered to the pool when missing) is
    loaded first when `ctx.may_load`, else 403 / 503 as a chat request naming it gets."""
    pool = policy.models
    if pool is None or pool.owner_of(model) is None:
        served = policy.service()
        if served.served_name != model and model not in served.adapters:
            raise RequestValidationError(f"Model not loaded: {model[:64]!r}.")
    else:
        served = pool.get(pool.owner_of(model))
    if model != served.served_name:
        raise RequestValidationError("The quality meter measures models, not LoRA adapters.")
    if precision(served) == "fp32":
        return await compare(served, served, prompt_ids, reply_ids)
    ref_name = reference or reference_id(served.served_name)
    ref_svc = await _reference(policy, ctx, served, ref_name)
    flight = policy.admission.enter(ctx.client)
    try:
        timeout = policy.settings.request_timeout_s or None
        try:
            return await asyncio.wait_for(compare(served, ref_svc, prompt_ids, reply_ids, ref_name), timeout)
        except asyncio.TimeoutError:
            raise ServiceUnavailableError(f"The quality meter timed out after {timeout} s.") from None
    finally:
        flight.close()


async def _reference(policy: Any, ctx: Any, served: ChatService, name: str) -> ChatService:
    """The loaded reference: the pool's entry `name` (the served model's REFERENCE entry offered when missing),
    loaded and waited for when the caller may load models."""
    pool = policy.models
    if pool is None:
        raise RequestValidationError(
            f"No reference model {name[:64]!r}: the quality meter needs a server with a model pool."
        )
    if name not in pool.candidates and name == reference_id(served.served_name):
        from engine.model_registry import variant

        base = name.rsplit("@", 1)[0]
        if base in pool.candidates:
            pool.offer(variant(pool.candidates[base], REFERENCE))
    loaded = pool.get(name)
    if loaded is not None:
        return loaded
    if name not in pool.candidates:
        raise RequestValidationError(f"No reference model {name[:64]!r} on this server.")
    if not ctx.may_load:
        pool.service_for(name, may_load=False)  # raises the pool's 403 (or 503 while another load runs)
    progress = pool.load(name)
    await asyncio.to_thread(progress.done.wait, LOAD_WAIT_S)
    loaded = pool.get(name)
    if loaded is None:
        raise ServiceUnavailableError(f"The reference model {name[:64]!r} did not load; see the server log.")
    return loaded


async def measure_request(
    policy: Any, ctx: Any, body: dict[str, Any], reply_ids: list[int], reference: str | None = None
) -> Quality:
    """`measure` of a chat reply from the body that produced it: its prompt ids rendered as the chat rendered them
    (engine/serving/tokenize.py render_chat, on the served model)."""
    from engine.protocol.request import parse_chat_request
    from engine.serving.tokenize import render_chat

    if not isinstance(body.get("messages"), list):
        raise RequestValidationError("The quality meter measures chat replies (a body with messages).")
    req = parse_chat_request(body)
    model = str(req.model)
    pool = policy.models
    owner = pool.owner_of(model) if pool is not None else None
    served = pool.get(owner) if pool is not None and owner is not None else policy.service()
    _, _, prompt_ids, media = await render_chat(served, req, req.add_generation_prompt, req.continue_final_message)
    if media:
        raise RequestValidationError("The quality meter measures text prompts; this one has media.")
    return await measure(policy, ctx, model, prompt_ids, reply_ids, reference)
