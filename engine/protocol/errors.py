"""Typed API errors. Each carries the status class; the route family turns it into a body (api.py)."""

from __future__ import annotations


class ApiError(Exception):
    """An error that maps to one HTTP status. `message` is safe to show to the client."""

    status: int = 500

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class RequestValidationError(ApiError):
    """Input failed validation (422 on /v1, 400 on Pangu routes).

    `missing` marks a missing required field (Pangu answers those with PANGU.3278); `code` overrides the Pangu
    code for the few rules that have their own (PANGU.3320 / PANGU.3321).
    """

    status = 422

    def __init__(self, message: str, *, missing: bool = False, code: str | None = None) -> None:
        super().__init__(message)
        self.missing = missing
        self.code = code


class NotFoundError(ApiError):
    status = 404


class AuthError(ApiError):
    status = 401

    def __init__(self, message: str, *, missing: bool) -> None:
        super().__init__(message)
        self.missing = missing


class PayloadTooLargeError(ApiError):
    status = 413


class RequestTimeoutError(ApiError):
    """The client sent its request too slowly (`--read-timeout-s`)."""

    status = 408


class ServiceUnavailableError(ApiError):
    """Loading, draining, faulted, queue full, timed out or out of resources before the first token."""

    status = 503

    def __init__(self, message: str, *, queue_full: bool = False, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.queue_full = queue_full
        self.retry_after = retry_after  # seconds, sent as Retry-After (a model still loading)


class ForbiddenError(ApiError):
    """Valid credentials that may not do this (an administrator's action: --admin-keys)."""

    status = 403


class GenerationError(ApiError):
    """The engine refused to create the request (an internal precondition)."""

    status = 424


class IncompleteGenerationError(ApiError):
    """Internal failure before the first token."""

    status = 500


class MethodNotAllowedError(ApiError):
    status = 405

    def __init__(self, message: str, *, allow: str) -> None:
        super().__init__(message)
        self.allow = allow


class TooManyRequestsError(ApiError):
    """One client already has `max_concurrent_per_client` chat requests in flight (429 on every route)."""

    status = 429
