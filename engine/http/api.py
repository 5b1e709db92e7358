"""The FastAPI app: routes, auth, status codes, health, metrics and models. The chat routes' handler is chat.py.

The three chat routes (§1.1) share one handler (`ChatRoutes`), one request model and one service; they differ only
in credentials (auth.py), Pangu narrowing (pangu.py), the error bodies (error_bodies.py) and the wire writers
(wire.py for /v1, pangu_wire.py for the Pangu routes).
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from engine.config import PATH_SEGMENT, HttpSettings
from engine.http import openapi, server_routes, tokenize
from engine.http.auth import PanguV1Auth, api_bearer, check_bearer
from engine.http.chat import CHAT_PATHS, PANGU_V1_PATH, ChatRoutes, read_body
from engine.http.completions import COMPLETIONS_PATH, CompletionRoutes
from engine.http.error_bodies import ERROR_TYPES, error_response, family_of
from engine.http.middleware import ApiRouting, RequestContext
from engine.http.slow_clients import BodyReadDeadline
from engine.protocol.errors import (
    ApiError,
    MethodNotAllowedError,
    NotFoundError,
    ServiceUnavailableError,
)
from engine.serving.model_pool import ModelPool
from engine.serving.policy import RequestPolicy

__all__ = ["ERROR_TYPES", "check_bearer", "create_app", "read_body"]

PROJECT = "llm-playground"


def create_app(settings: HttpSettings, policy: RequestPolicy) -> FastAPI:
    """The API of one deployment; `policy` is the request policy its page (if any) shares. While the model is
    loading, `policy.service()` raises and the routes answer 503."""
    app = FastAPI(title="LLM Playground API", redirect_slashes=False, docs_url="/docs", openapi_url="/openapi.json")
    body_limit = settings.max_request_length_mb << 20
    admission, metrics, service = policy.admission, policy.metrics, policy.service
    app.state.admission = admission
    app.state.metrics = metrics
    app.state.policy = policy

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
        return error_response(family_of(request.url.path), exc)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        exc_headers = getattr(exc, "headers", None) or {}
        err: ApiError = ApiError(str(exc.detail))
        if exc.status_code == 404:
            err = NotFoundError("Not found.")
        elif exc.status_code == 405:
            err = MethodNotAllowedError("Method not allowed.", allow=exc_headers.get("Allow", ""))
        else:
            err.status = exc.status_code
        return error_response(family_of(request.url.path), err)

    @app.get("/health", include_in_schema=False)
    async def health() -> Response:
        service()
        if admission.draining:
            raise ServiceUnavailableError("The server is shutting down.")
        return Response(status_code=200)

    app.add_api_route("/v2/health/live", health, methods=["GET"], include_in_schema=False)
    app.add_api_route("/v2/health/ready", health, methods=["GET"], include_in_schema=False)

    @app.get("/metrics", include_in_schema=False)
    async def prometheus(request: Request) -> Response:
        api_bearer(request.headers, settings)
        return Response(metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")

    def model_card() -> dict[str, Any]:
        """§1.3's fields, plus `input_modalities` (extension): the content a request may carry for this model."""
        svc = service()
        return {
            "id": svc.served_name,
            "object": "model",
            "created": 1730000000,
            "owned_by": PROJECT,
            "root": svc.served_name,
            "parent": None,
            "max_model_len": svc.model.context_length,
            "input_modalities": svc.input_modalities(),
            "quantization": quantization(svc),
        }

    def quantization(svc: Any) -> str:
        """What the served projections' weights are (extension): "none", or the quantized forms and how many
        projections each ("Q4_1 x120": the GGUF's own blocks; "int4 x120": quantized at load)."""
        return str(getattr(svc.engine.runner, "quantization", "none"))

    def adapter_cards(svc: Any, extra: dict[str, Any]) -> list[dict[str, Any]]:
        return [
            {
                "id": a,
                "object": "model",
                "created": 1730000000,
                "owned_by": PROJECT,
                "root": a,
                "parent": svc.served_name,
                **extra,
            }
            for a in getattr(svc, "adapters", {})
        ]

    def pool_cards(models: ModelPool) -> list[dict[str, Any]]:
        """Every model the server can serve, in the registry's order, each with `status` (extension: loaded,
        loading, loadable, failed) and what the registry knows of it; a loaded model's adapters after it."""
        cards = []
        transcribes = {"audio"} if settings.audio_transcription else set()
        for model_id, c in models.candidates.items():
            svc = models.get(model_id)
            media = set(c.modalities) | transcribes
            card = {
                "id": model_id,
                "object": "model",
                "created": 1730000000,
                "owned_by": PROJECT,
                "root": model_id,
                "parent": None,
                "max_model_len": svc.model.context_length if svc else c.context_length,
                "input_modalities": svc.input_modalities()
                if svc
                else ["text", *(m for m in ("image", "video", "audio") if m in media)],
                **models.entry(model_id),
            }
            if svc is not None:
                card["quantization"] = quantization(svc)
            cards.append(card)
            if svc is not None:
                cards += adapter_cards(svc, {"status": "loaded"})
        return cards

    def model_cards() -> list[dict[str, Any]]:
        """The served model, then each LoRA adapter (§1.3: `root` its id, `parent` the served model); with
        several models (`--models-dir`, repeated `--model`), every one of them (`pool_cards`)."""
        if policy.models is not None:
            return pool_cards(policy.models)
        base = model_card()
        return [base, *adapter_cards(service(), {})]

    @app.get("/v1/models")
    async def list_models(request: Request) -> dict[str, Any]:
        api_bearer(request.headers, settings)
        return {"object": "list", "data": model_cards()}

    @app.get("/v1/models/{model_id:path}")
    async def get_model(model_id: str, request: Request) -> dict[str, Any]:
        api_bearer(request.headers, settings)
        for card in model_cards():
            if model_id == card["id"]:
                return card
        raise NotFoundError(f"Model not found: {model_id[:64]!r}.")

    chat = ChatRoutes(settings, policy, body_limit)
    pangu_v1_auth = PanguV1Auth(settings)

    @app.post(CHAT_PATHS["v1"], openapi_extra=openapi.route_extra("v1", "Chat completion (MindIE flavour)"))
    async def chat_completions(request: Request) -> Response:
        credential = api_bearer(request.headers, settings)
        return await chat.handle(request, "v1", credential)

    @app.post(CHAT_PATHS["pangu_v2"], openapi_extra=openapi.route_extra("pangu_v2", "Chat completion (Pangu V2)"))
    async def pangu_v2_chat(request: Request) -> Response:
        credential = api_bearer(request.headers, settings)
        return await chat.handle(request, "pangu_v2", credential)

    v1_extra = openapi.route_extra("pangu_v1", "Chat completion (Pangu V1)")
    v1_extra["parameters"] = [
        {
            "name": name,
            "in": "path",
            "required": True,
            "schema": {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,128}$"},
        }
        for name in ("project_id", "deployment_id")
    ]

    @app.post(PANGU_V1_PATH, openapi_extra=v1_extra)
    async def pangu_v1_chat(request: Request) -> Response:
        for name, configured in (
            ("project_id", settings.pangu_project_id),
            ("deployment_id", settings.pangu_deployment_id),
        ):
            value = request.path_params[name]
            if not PATH_SEGMENT.fullmatch(value) or (configured and value != configured):
                raise NotFoundError("The inference service does not exist.")
        credential = await pangu_v1_auth.check(request, body_limit)
        return await chat.handle(request, "pangu_v1", credential)

    completions = CompletionRoutes(settings, policy, body_limit)

    @app.post(COMPLETIONS_PATH, openapi_extra=openapi.completions_extra())
    async def legacy_completions(request: Request) -> Response:
        credential = api_bearer(request.headers, settings)
        return await completions.handle(request, credential)

    tokenize.install(app, settings, policy, body_limit)
    server_routes.install(app, settings, policy)
    openapi.install(app, settings)
    # Snapshot of the API's own routes, taken before app.py mounts the Gradio UI at "/" (see ApiRouting).
    routes = list(app.router.routes)
    if settings.read_timeout_s:  # a body that pauses too long: 408, in the family's body, before the routes see it
        app.add_middleware(BodyReadDeadline, seconds=settings.read_timeout_s)
    app.add_middleware(ApiRouting, routes=routes)
    app.add_middleware(RequestContext, routes=routes, metrics=metrics)  # outermost: sees every answer
    return app
