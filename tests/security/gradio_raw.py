"""Gradio's wire protocol spoken by hand, as an attacker speaks it: the page's `/config`, `POST /gradio_api/queue/join`
with any `session_hash` and any `fn_index`, the `/gradio_api/queue/data` stream, and raw requests whose path is
sent exactly as written (curl's `--path-as-is`: no client normalises `..` away)."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable
from typing import Any

import httpx

Dependency = dict[str, Any]


def config(http: httpx.Client) -> dict[str, Any]:
    r = http.get("/config")
    assert r.status_code == 200, r.text[:200]
    return r.json()


def component_types(cfg: dict[str, Any]) -> dict[int, str]:
    return {c["id"]: c.get("type", "") for c in cfg["components"]}


def find(cfg: dict[str, Any], match: Callable[[Dependency], bool], what: str) -> int:
    """The fn_index (the dependency's position, which is its id) of the first dependency `match` takes."""
    for index, dep in enumerate(cfg["dependencies"]):
        if match(dep):
            return dep.get("id", index)
    raise AssertionError(f"the page has no {what} endpoint")


def defaults(cfg: dict[str, Any], dep_id: int) -> list[Any]:
    """The inputs' default values, as the page's first load would send them (states: null, the server has them)."""
    comps = {c["id"]: c for c in cfg["components"]}
    dep = next(d for i, d in enumerate(cfg["dependencies"]) if d.get("id", i) == dep_id)
    return [(comps[i].get("props") or {}).get("value") for i in dep["inputs"]]


def join(http: httpx.Client, fn_index: int, data: list[Any], session_hash: str, timeout: float = 60) -> dict[str, Any]:
    """One event on the queue under `session_hash`, followed to its end; returns its last message."""
    body = {"data": data, "fn_index": fn_index, "session_hash": session_hash, "event_data": None, "trigger_id": None}
    r = http.post("/gradio_api/queue/join", json=body)
    assert r.status_code == 200, r.text[:300]
    last: dict[str, Any] = {}
    deadline = time.monotonic() + timeout
    with http.stream("GET", "/gradio_api/queue/data", params={"session_hash": session_hash}, timeout=timeout) as s:
        for line in s.iter_lines():
            if not line.startswith("data:"):
                continue
            last = json.loads(line[5:])
            if last.get("msg") in ("process_completed", "close_stream") or time.monotonic() > deadline:
                break
    return last


def raw_get(url: str, path: str, seconds: float, headers: dict[str, str] | None = None) -> bytes:
    """`curl --path-as-is -N --max-time <seconds> URL<path>`: the request line carries `path` byte for byte; the
    connection is held for `seconds`, then closed."""
    u = httpx.URL(url)
    extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
    got = b""
    with socket.create_connection((u.host, u.port), timeout=seconds) as sock:
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {u.host}:{u.port}\r\n{extra}Accept: */*\r\n\r\n".encode())
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            sock.settimeout(left)
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                break
            if not chunk:
                break
            got += chunk
    return got
