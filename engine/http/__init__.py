"""HTTP only: routes, auth, status codes, middleware, SSE and the /v1 and Pangu wire formats, OpenAPI.

Reads bodies, authenticates, builds the request context and hands the request to engine/serving; everything a
request is allowed or refused for lives there, so the page and the notebooks get the same policy.
"""
