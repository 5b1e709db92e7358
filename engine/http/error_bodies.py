"""One ApiError, three error bodies (spec §6.1-§6.3): the route family decides the status and the shape.

The family of a path is decided by its prefix, so unknown paths get the body their prefix suggests: `/api/v2/...`
the V2 body, a path of the V1 shape (`/v1/<project>/deployments/...`) the Pangu V1 body, anything else the `/v1`
(MindIE) body.
"""

from __future__ import annotations

import re
import uuid
from typing import Any

from fastapi.responses import JSONResponse

from engine.protocol.errors import (
    ApiError,
    AuthError,
    ForbiddenError,
    GenerationError,
    MethodNotAllowedError,
    NotFoundError,
    PayloadTooLargeError,
    RequestTimeoutError,
    RequestValidationError,
    ServiceUnavailableError,
    TooManyRequestsError,
)
from engine.protocol.request import Route

ERROR_TYPES = {
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFoundError",
    405: "Method Not Allowed",
    408: "Request Timeout",
    413: "Payload Too Large",
    422: "Input Validation Error",
    424: "Generation Error",
    429: "Too Many Requests",
    500: "Incomplete Generation",
    503: "Service Unavailable",
}
PANGU_MESSAGES = {
    "PANGU.0010": "parameter illegal.",
    "PANGU.0011": "authentication failed.",
    "PANGU.0012": "authentication information missing.",
    "PANGU.0031": "inner service exception.",
    "PANGU.3254": "inference service does not exist.",
    "PANGU.3267": "too many requests.",
    "PANGU.3278": "required parameter missing.",
    "PANGU.3320": "non-stream n must be 1 or 2.",
    "PANGU.3321": "stream n must be 1.",
    "PANGU.3342": "inference service call failed.",
}
V2_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    403: "authentication_error",
    405: "invalid_request_error",
    408: "invalid_request_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
}
_V1_SHAPE = re.compile(r"/v1/[^/]+/deployments(/|$)")


def family_of(path: str) -> Route:
    if path == "/api/v2" or path.startswith("/api/v2/"):
        return "pangu_v2"
    if _V1_SHAPE.match(path):
        return "pangu_v1"
    return "v1"


def pangu_status(exc: ApiError) -> tuple[int, str]:
    """Status and Pangu code of an error on a Pangu route (§6.1 right-hand column)."""
    if isinstance(exc, RequestValidationError):
        return 400, exc.code or ("PANGU.3278" if exc.missing else "PANGU.0010")
    if isinstance(exc, AuthError):
        return 401, "PANGU.0012" if exc.missing else "PANGU.0011"
    if isinstance(exc, ForbiddenError):
        return 403, "PANGU.0011"
    if isinstance(exc, NotFoundError):
        return 404, "PANGU.3254"
    if isinstance(exc, MethodNotAllowedError):
        return 405, "PANGU.3254"  # the spec gives no code for 405; the service does not exist for that method
    if isinstance(exc, PayloadTooLargeError):
        return 413, "PANGU.0010"
    if isinstance(exc, RequestTimeoutError):
        return 408, "PANGU.0010"
    if isinstance(exc, TooManyRequestsError) or (isinstance(exc, ServiceUnavailableError) and exc.queue_full):
        return 429, "PANGU.3267"
    if isinstance(exc, GenerationError):
        return 500, "PANGU.3342"
    return 500, "PANGU.0031"


def new_pangu_id() -> str:
    return "chat-" + uuid.uuid4().hex


def error_body(family: Route, exc: ApiError, request_id: str | None = None) -> tuple[int, dict[str, Any]]:
    """(status, body) of `exc` for the route family. `request_id` is the V2 body's `id` (fresh when None)."""
    v1_body = {"error": exc.message, "error_type": ERROR_TYPES.get(exc.status, "Error")}
    if family == "v1":
        return exc.status, v1_body
    status, code = pangu_status(exc)
    if family == "pangu_v1":
        return status, {"error_code": code, "error_msg": PANGU_MESSAGES[code], "details": [v1_body]}
    error = {"code": code, "type": V2_TYPES.get(status, "server_error"), "message": exc.message}
    return status, {"error": error, "id": request_id or new_pangu_id()}


def error_response(family: Route, exc: ApiError) -> JSONResponse:
    """The JSON error response; a V2 body's fresh `id` doubles as its X-Request-Id (unless the client sent one)."""
    request_id = new_pangu_id() if family == "pangu_v2" else None
    status, body = error_body(family, exc, request_id)
    headers = {"X-Request-Id": request_id} if request_id else {}
    if isinstance(exc, MethodNotAllowedError):
        headers["Allow"] = exc.allow
    if isinstance(exc, ServiceUnavailableError) and exc.retry_after is not None:
        headers["Retry-After"] = str(exc.retry_after)
    return JSONResponse(body, status_code=status, headers=headers)
