"""The OpenAPI document's responses: every status each route answers (spec §6.1) and the bodies that come with it.

Where each status comes from: 401 auth.py (only with credentials configured), 404 the model lookup and the V1
deployment path (api.py), 413 the body cap (chat.py `read_body`), 422 / 400 every validation failure
(RequestValidationError, §6.1: one status per failure class per route family), 429 the per-client limit
(admission), 503 loading, draining, a full queue or the request timeout waiting for the engine, 500 an internal
failure before the first token. On Pangu routes error_bodies.py `pangu_status` folds 503 into 429 (queue full) or
500 (PANGU.0031). Schemas name the fields every answer carries; further fields may follow.
"""

from __future__ import annotations

from typing import Any

from engine.http.error_bodies import ERROR_TYPES, PANGU_MESSAGES, V2_TYPES
from engine.protocol.request import Route

REF = "#/components/schemas/{model}"
CHAT_ERROR_SCHEMAS: dict[Route, str] = {
    "v1": "ChatCompletionRequestError",
    "pangu_v2": "PanguV2ChatCompletionRequestError",
    "pangu_v1": "PanguV1ChatCompletionRequestError",
}
_V1_ERROR = {
    "type": "object",
    "required": ["error", "error_type"],
    "properties": {"error": {"type": "string"}, "error_type": {"enum": sorted({*ERROR_TYPES.values(), "Error"})}},
}
_PANGU_CODE = {"enum": sorted(PANGU_MESSAGES)}
ERROR_SCHEMAS: dict[str, Any] = {
    "ChatCompletionRequestError": _V1_ERROR,
    "PanguV2ChatCompletionRequestError": {
        "type": "object",
        "required": ["error", "id"],
        "properties": {
            "error": {
                "type": "object",
                "required": ["code", "type", "message"],
                "properties": {
                    "code": _PANGU_CODE,
                    "type": {"enum": sorted({*V2_TYPES.values(), "server_error"})},
                    "message": {"type": "string"},
                },
            },
            "id": {"type": "string"},
        },
    },
    "PanguV1ChatCompletionRequestError": {
        "type": "object",
        "required": ["error_code", "error_msg", "details"],
        "properties": {
            "error_code": _PANGU_CODE,
            "error_msg": {"type": "string"},
            "details": {"type": "array", "items": _V1_ERROR},
        },
    },
}
_USAGE = {
    "type": "object",
    "required": ["prompt_tokens", "completion_tokens", "total_tokens"],
    "properties": {
        k: {"type": "integer", "minimum": 0} for k in ("prompt_tokens", "completion_tokens", "total_tokens")
    },
}
_CHOICE = {
    "type": "object",
    "required": ["index", "message", "finish_reason"],
    "properties": {
        "index": {"type": "integer", "minimum": 0},
        "message": {
            "type": "object",
            "required": ["role", "content"],
            "properties": {
                "role": {"const": "assistant"},
                "content": {"type": "string"},
                "reasoning_content": {"type": "string"},
                "tool_calls": {"type": "array", "items": {"type": "object"}},
            },
        },
        "logprobs": {"anyOf": [{"type": "object"}, {"type": "null"}]},
        "finish_reason": {"anyOf": [{"type": "string"}, {"type": "null"}]},
    },
}
SUCCESS_SCHEMAS: dict[str, Any] = {
    "ChatCompletion": {
        "type": "object",
        "description": "The non-stream answer of all three routes (§4); /v1 adds MindIE's timing fields.",
        "required": ["id", "object", "created", "model", "choices", "usage"],
        "properties": {
            "id": {"type": "string"},
            "object": {"const": "chat.completion"},
            "created": {"type": "integer"},
            "model": {"type": "string"},
            "choices": {"type": "array", "items": _CHOICE},
            "usage": _USAGE,
        },
    },
    "ModelCard": {
        "type": "object",
        "required": ["id", "object", "created", "owned_by", "root", "parent"],
        "properties": {
            "id": {"type": "string"},
            "object": {"const": "model"},
            "created": {"type": "integer"},
            "owned_by": {"type": "string"},
            "root": {"type": "string"},
            "parent": {"anyOf": [{"type": "string"}, {"type": "null"}]},
            "max_model_len": {"type": "integer"},
            "input_modalities": {"type": "array", "items": {"enum": ["text", "image", "video", "audio"]}},
            "quantization": {
                "type": "string",
                "description": "Extension: what a loaded model's linear projections are kept as: none, or the "
                "quantized forms with how many projections each (Q4_1 x120: a GGUF's own blocks; int4 x120).",
            },
            # Extension, with several models (--models-dir, a repeated --model); read from the files, not loaded.
            "status": {
                "enum": ["loaded", "loading", "loadable", "failed"],
                "description": "Whether the model serves now; a request for a loadable one loads it (503 "
                "with Retry-After until it is ready).",
            },
            "architecture": {"type": "string", "description": "config.json model_type (GGUF: general.architecture)"},
            "size_bytes": {"type": "integer", "description": "Weights on disk"},
            "parameters": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
            "memory_bytes": {"type": "integer", "description": "Estimated cost when loaded: weights + KV pool"},
            "context_length": {"type": "integer"},
            "reasoning": {"type": "boolean", "description": "<think> and </think> are tokens of the tokenizer"},
            "tools": {"type": "boolean", "description": "The chat template selects a tool-call parser"},
            "loading": {
                "type": "object",
                "description": "While loading: fraction, stage, elapsed_s",
                "properties": {
                    "fraction": {"type": "number"},
                    "stage": {"type": "string"},
                    "elapsed_s": {"type": "number"},
                },
            },
        },
    },
    "ModelList": {
        "type": "object",
        "required": ["object", "data"],
        "properties": {
            "object": {"const": "list"},
            "data": {"type": "array", "items": {"$ref": REF.format(model="ModelCard")}},
        },
    },
}
COMPLETION_SCHEMAS: dict[str, Any] = {
    "Completion": {
        "type": "object",
        "description": "POST /v1/completions' non-stream answer (docs/completions.md), with MindIE's timing fields.",
        "required": ["id", "object", "created", "model", "choices", "usage"],
        "properties": {
            "id": {"type": "string", "pattern": "^cmpl-"},
            "object": {"const": "text_completion"},
            "created": {"type": "integer"},
            "model": {"type": "string"},
            "choices": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["index", "text", "logprobs", "finish_reason"],
                    "properties": {
                        "index": {"type": "integer"},
                        "text": {"type": "string"},
                        "logprobs": {"type": ["object", "null"]},
                        "finish_reason": {"type": ["string", "null"]},
                        "prompt_logprobs": {"type": ["array", "null"]},
                    },
                },
            },
            "usage": {"type": "object"},
            "prefill_time": {"type": "integer"},
            "decode_time_arr": {"type": "array", "items": {"type": "integer"}},
        },
    },
}
SSE_EVENT = {
    "type": "object",
    "description": "One server-sent event: a chat.completion.chunk, an error body after the stream started (§6.4), "
    "or the [DONE] terminator.",
    "required": ["data"],
    "properties": {
        "data": {"type": "string", "pattern": "^(\\[DONE\\]|\\{[\\s\\S]*\\})$"},
        "event": {"type": "string"},
    },
}
_CHAT_STATUSES: dict[Route, dict[str, str]] = {
    "v1": {
        "401": "Missing or wrong credentials (only with --api-keys)",
        "403": "The model asked for is not loaded and loading it needs an admin key (--admin-keys)",
        "413": "Body too large",
        "422": "Invalid request: any validation failure, an unknown model, a prompt too long, a template error",
        "429": "Too many concurrent requests from this client",
        "500": "Internal failure before the first token",
        "503": "Loading (also the model asked for, loading on demand: Retry-After), draining, queue full, or "
        "timed out waiting for the engine",
    },
    "pangu_v2": {
        "400": "Invalid request (PANGU.0010, .3278, .3320, .3321)",
        "401": "PANGU.0012 / PANGU.0011 (only with --api-keys)",
        "403": "The model is not loaded and loading it needs an admin key (PANGU.0011)",
        "413": "Body too large (PANGU.0010)",
        "429": "Queue or client limit (PANGU.3267)",
        "500": "Loading, draining, timed out or internal failure (PANGU.0031, PANGU.3342)",
    },
}
_CHAT_STATUSES["pangu_v1"] = {
    **{k: v for k, v in _CHAT_STATUSES["pangu_v2"].items() if k != "403"},  # no model
    "401": "PANGU.0012 / PANGU.0011 (only with --pangu-auth-tokens / --pangu-app-codes)",
    "404": "Deployment does not exist (PANGU.3254)",
}
_MODEL_STATUSES = {"401": "Missing or wrong credentials (only with --api-keys)", "503": "The model is loading"}


def _json(name: str) -> dict[str, Any]:
    return {"application/json": {"schema": {"$ref": REF.format(model=name)}}}


def chat_responses(route: Route) -> dict[str, Any]:
    ok = {
        "description": "A chat.completion object, or with `stream` an SSE stream of chat.completion.chunk events.",
        "content": {**_json("ChatCompletion"), "text/event-stream": {"schema": SSE_EVENT}},
    }
    error = _json(CHAT_ERROR_SCHEMAS[route])
    return {
        "200": ok,
        **{code: {"description": text, "content": error} for code, text in _CHAT_STATUSES[route].items()},
    }


def model_responses(one: bool) -> dict[str, Any]:
    """GET /v1/models (`one` False) and GET /v1/models/{model_id}: 404 for an id that is neither the served model nor one of its LoRA adapters."""
    statuses = {**_MODEL_STATUSES, **({"404": "No such model"} if one else {})}
    ok = {
        "description": "The served model" if one else "The served models",
        "content": _json("ModelCard" if one else "ModelList"),
    }
    error = _json("ChatCompletionRequestError")
    return {"200": ok, **{code: {"description": text, "content": error} for code, text in sorted(statuses.items())}}
