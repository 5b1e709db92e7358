"""The start-up refusal of a server open to the network with no credentials (spec §1.2): engine/http/auth.py says
which routes a stranger could call; binding a non-loopback address while any is open takes `--insecure-public`."""

from __future__ import annotations

import logging
import os

from engine import config as cfg
from engine.http.auth import any_credentials, open_routes

log = logging.getLogger("playground")


def check_exposure(settings: cfg.HttpSettings) -> None:
    """Refuse to serve a non-loopback address while any inference route is open (no credentials configured)
    unless the operator says so with --insecure-public. A Hugging Face Space is a public bind like any other: set
    PLAYGROUND_API_KEYS (a Space secret) or PLAYGROUND_INSECURE_PUBLIC=1 there."""
    if settings.mcp and settings.reachable_from_outside and not any_credentials(settings):
        # No --insecure-public exception: a tool any agent on the network may call needs a key.
        raise SystemExit(
            f"refusing {cfg.cli_flag('mcp')} on {settings.bind_host} without credentials: set "
            "--api-keys (MCP clients send one as 'Authorization: Bearer <key>') or bind 127.0.0.1"
        )
    unguarded = open_routes(settings)
    if not settings.reachable_from_outside or not unguarded:
        return
    if settings.insecure_public:
        log.warning(
            "--insecure-public: serving %s with no credentials; open to anyone: %s",
            settings.bind_host,
            ", ".join(unguarded),
        )
        return
    raise SystemExit(
        f"refusing to serve {settings.bind_host} with no credentials ({', '.join(unguarded)} would be open to "
        "anyone): set --api-keys (or Pangu tokens / app codes), bind 127.0.0.1, or pass --insecure-public"
        + (
            " (on a Hugging Face Space: the secret PLAYGROUND_API_KEYS, or the variable PLAYGROUND_INSECURE_PUBLIC=1)"
            if os.environ.get("SPACE_ID")
            else ""
        )
    )
