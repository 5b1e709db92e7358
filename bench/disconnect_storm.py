"""Disconnect storm: clients queue long requests, then leave; how long until the engine is idle again.

    .venv/bin/python bench/disconnect_storm.py --url http://127.0.0.1:7860 [--clients 32] [--max-tokens 400]
        [--prompt-words 600] [--hold-s 2] [--limit-s 180] [--api-key K]

Each client opens its own socket, sends one chat request (half of them streaming) with a long prompt and
`max_tokens` long answers (`ignore_eos`), keeps the connection `--hold-s` seconds (while most are still queued or
prefilling), then closes it: what a crowd of impatient users, or an attacker, does. From the last close the run
polls `GET /server/state` until no request runs or waits, and reports that time (`idle_after_s`; capped at
`--limit-s`, after which the run stops polling and says `idle: false`). A server that aborts on disconnect at any
stage (vLLM's behaviour, issue 31) is idle within a step or two; one that lets queued requests run until their
first token (or their timeout) keeps the engine busy for minutes. Bounded: at most `--clients` sockets, each
held for `--hold-s`, and at most `--limit-s` of polling.
"""

from __future__ import annotations

import argparse
import json
import socket
import threading
import time
from urllib.parse import urlsplit

import httpx

PANGRAM = "the quick brown fox jumps over a lazy dog while seven wizards quietly judge boxing matches"
WORDS = PANGRAM.split()


def _body(i: int, args: argparse.Namespace) -> bytes:
    words = " ".join(WORDS[(i + k) % len(WORDS)] for k in range(args.prompt_words))  # distinct per client
    body = {
        "model": args.model,
        "messages": [{"role": "user", "content": f"{i}: {words}"}],
        "max_tokens": args.max_tokens,
        "ignore_eos": True,
        "stream": i % 2 == 1,
    }
    return json.dumps(body).encode()


def _client(i: int, args: argparse.Namespace, host: str, port: int, sent: threading.Barrier) -> None:
    payload = _body(i, args)
    auth = f"Authorization: Bearer {args.api_key}\r\n" if args.api_key else ""
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
        f"{auth}Content-Length: {len(payload)}\r\n\r\n"
    ).encode()
    with socket.create_connection((host, port), timeout=30) as sock:
        sock.sendall(head + payload)
        sent.wait()
        time.sleep(args.hold_s)
    # leaving the block closes the socket: the client is gone


def _load(client: httpx.Client, headers: dict[str, str]) -> dict[str, int]:
    state = client.get("/server/state", headers=headers).json()
    return {k: state["requests"][k] for k in ("running", "waiting")}


def run(args: argparse.Namespace) -> dict:
    url = urlsplit(args.url)
    host, port = url.hostname or "127.0.0.1", url.port or 80
    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    sent = threading.Barrier(args.clients)
    threads = [threading.Thread(target=_client, args=(i, args, host, port, sent)) for i in range(args.clients)]
    with httpx.Client(base_url=args.url, timeout=30) as client:
        before = _load(client, headers)
        for t in threads:
            t.start()
        time.sleep(min(args.hold_s, 1.0))
        during = _load(client, headers)
        for t in threads:
            t.join()
        left = time.monotonic()
        idle, load = False, during
        while time.monotonic() - left < args.limit_s:
            load = _load(client, headers)
            if load["running"] == 0 and load["waiting"] == 0:
                idle = True
                break
            time.sleep(0.1)
        took = time.monotonic() - left
    return {
        "clients": args.clients,
        "max_tokens": args.max_tokens,
        "prompt_words": args.prompt_words,
        "hold_s": args.hold_s,
        "load_before": before,
        "load_while_held": during,
        "idle": idle,
        "idle_after_s": round(took, 2),
        "load_at_end": load,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:7860")
    parser.add_argument("--model", default="SmolLM2-135M-Instruct")
    parser.add_argument("--api-key", default="")
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--max-tokens", type=int, default=400)
    parser.add_argument("--prompt-words", type=int, default=600)
    parser.add_argument("--hold-s", type=float, default=2.0)
    parser.add_argument("--limit-s", type=float, default=180.0)
    print(json.dumps(run(parser.parse_args())))


if __name__ == "__main__":
    main()
