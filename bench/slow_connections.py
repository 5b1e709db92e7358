"""Slow-connection (slowloris) run: N sockets that send nothing, trickle their headers, or stop mid-body; how many
the server closes and when (`--read-timeout-s`, engine/http/slow_clients.py).

    .venv/bin/python bench/slow_connections.py                       # an in-process server, --read-timeout-s 5
    .venv/bin/python bench/slow_connections.py --read-timeout-s 30   # the default deadline
    .venv/bin/python bench/slow_connections.py --url http://127.0.0.1:7860 --sockets 200 --wait 90

Bounded: at most `--sockets` connections per mode, each kept for at most `--wait` seconds (default: the deadline
plus 10 s), one byte every `--every` seconds for the trickling ones. The in-process server needs no model (its
routes answer 503 while "loading"; the connection handling is the same). Prints one JSON report: per mode, the
sockets opened, how many the server closed (and with a 408), how many were still open at the end, and the
seconds to close (p50, p90, max).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import selectors
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

MODES = {
    "silent": (b"", b""),
    "headers": (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n", b"X-Slow: " + b"a" * 100_000),
    "body": (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b'Content-Length: 1000\r\n\r\n{"messages": ',
        b"",
    ),
}


@contextlib.contextmanager
def local_server(read_timeout_s: int) -> Iterator[str]:
    import engine  # noqa: F401  (process settings that must precede `import torch`)
    from app import serve_in_thread, settings_from

    cfg = settings_from(["--no-ui", "--read-timeout-s", str(read_timeout_s)], environ={})
    server = serve_in_thread(cfg, None)
    try:
        yield server.url
    finally:
        server.stop()


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 2)


def run_mode(url: str, mode: str, sockets: int, wait: float, every: float) -> dict[str, Any]:
    host, port = url.removeprefix("http://").rstrip("/").rsplit(":", 1)
    first, trickle = MODES[mode]
    selector = selectors.DefaultSelector()
    opened: dict[socket.socket, dict[str, Any]] = {}
    started = time.monotonic()
    for _ in range(sockets):
        try:
            sock = socket.create_connection((host, int(port)), timeout=5)
        except OSError:
            break
        sock.setblocking(False)
        if first:
            sock.sendall(first)
        opened[sock] = {"sent": 0, "closed": None, "reply": b""}
        selector.register(sock, selectors.EVENT_READ)
    next_byte = time.monotonic() + every
    while time.monotonic() - started < wait and any(s["closed"] is None for s in opened.values()):
        for key, _ in selector.select(timeout=0.1):
            sock = key.fileobj
            state = opened[sock]  # type: ignore[index]
            try:
                data = sock.recv(4096)  # type: ignore[union-attr]
            except (ConnectionResetError, BlockingIOError):
                data = b""
            state["reply"] += data
            if not data:
                state["closed"] = time.monotonic() - started
                selector.unregister(sock)
        if trickle and time.monotonic() >= next_byte:
            next_byte += every
            for sock, state in opened.items():
                if state["closed"] is None:
                    with contextlib.suppress(OSError):
                        sock.sendall(trickle[state["sent"] % len(trickle) : state["sent"] % len(trickle) + 1])
                        state["sent"] += 1
    closed = [s["closed"] for s in opened.values() if s["closed"] is not None]
    report = {
        "opened": len(opened),
        "closed_by_server": len(closed),
        "answered_408": sum(s["reply"].startswith(b"HTTP/1.1 408") for s in opened.values()),
        "still_open": len(opened) - len(closed),
        "close_s_p50": percentile(closed, 0.5),
        "close_s_p90": percentile(closed, 0.9),
        "close_s_max": round(max(closed), 2) if closed else None,
    }
    for sock in opened:
        sock.close()
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="", help="a running server (default: start one in this process)")
    parser.add_argument("--read-timeout-s", type=int, default=5, help="the in-process server's deadline")
    parser.add_argument("--sockets", type=int, default=200, help="connections per mode")
    parser.add_argument("--wait", type=float, default=0, help="seconds to hold them (default: deadline + 10)")
    parser.add_argument("--every", type=float, default=1.0, help="seconds between two trickled bytes")
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated: " + ", ".join(MODES))
    args = parser.parse_args()
    wait = args.wait or args.read_timeout_s + 10
    with contextlib.ExitStack() as stack:
        url = args.url or stack.enter_context(local_server(args.read_timeout_s))
        report = {
            "url": url,
            "read_timeout_s": None if args.url else args.read_timeout_s,
            "wait_s": wait,
            "modes": {m: run_mode(url, m, args.sockets, wait, args.every) for m in args.modes.split(",")},
        }
    print(json.dumps(report, indent=2))
    return 0 if all(m["still_open"] == 0 for m in report["modes"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
