"""`POST /tokenize` and `POST /detokenize` (issue 19): the rendered prompt's tokens, in vLLM's shapes.

Behind what chat is behind: the Bearer keys (auth.py, closed once any credential is set), chat's admission (the
per-client limit and draining, counted with the client's chat requests: a template render is as much work as a
chat's, issue 31), the body cap (413 as soon as it is exceeded, chat.py
`read_body`), the same JSON decoding and, for a chat form, the chat request's own validation (422 with the /v1
error body). The work is engine/serving/tokenize.py's, on the loaded model the body names (the current one when it
names none); 503 while that model loads.
"""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from engine.config import HttpSettings
from engine.http.auth import api_bearer, client_key
from engine.http.chat import decode_json, read_body
from engine.protocol.tokenize import parse_detokenize_request, parse_tokenize_request
from engine.serving import tokenize as tokens
from engine.serving.policy import RequestPolicy

TOKENIZE_PATH, DETOKENIZE_PATH = "/tokenize", "/detokenize"


def install(app: FastAPI, settings: HttpSettings, policy: RequestPolicy, body_limit: int) -> None:
    """The routes on the API's app, behind the same auth and limits as chat."""

    @app.post(TOKENIZE_PATH, include_in_schema=False)
    async def tokenize(request: Request) -> JSONResponse:
        credential = api_bearer(request.headers, settings)
        host = request.client.host if request.client else None
        flight = policy.admission.enter(client_key(credential, host))
        try:
            req = parse_tokenize_request(decode_json(await read_body(request, body_limit)))
            return JSONResponse(await tokens.tokenize(policy.loaded_service(req.model), req))
        finally:
            flight.close()

    @app.post(DETOKENIZE_PATH, include_in_schema=False)
    async def detokenize(request: Request) -> JSONResponse:
        api_bearer(request.headers, settings)
        req = parse_detokenize_request(decode_json(await read_body(request, body_limit)))
        return JSONResponse(await tokens.detokenize(policy.loaded_service(req.model), req))
