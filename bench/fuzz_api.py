"""Fuzz the three chat routes with thousands of generated bodies (the strategies of tests/fuzz_bodies.py).

    .venv/bin/python bench/fuzz_api.py --examples 5000            # an in-process server on the bundled model
    .venv/bin/python bench/fuzz_api.py --examples 5000 --url URL   # any running instance of this server

The in-process server caps generation at 4 tokens and n at 4 so that each example stays cheap. Reports the
requests sent, the statuses by route, every problem (5xx, wrong family status or body, leaks, torn streams),
whether /health still answers 200 afterwards and whether a greedy reference request still gives the same answer
as before the fuzzing. Exits non-zero on any problem.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx
from hypothesis import HealthCheck, given, settings

from tests.fuzz_bodies import MODEL, ROUTES, problems, requests

REFERENCE = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "temperature": 0, "max_tokens": 4}


@contextlib.contextmanager
def local_server(*flags: str) -> Iterator[str]:
    """The real app in this process, capped at 4 tokens (and `flags`), on a free loopback port; its URL."""
    import engine  # noqa: F401  (process settings that must precede `import torch`)
    from app import build_service, serve_in_thread, settings_from

    cfg = settings_from(["--no-ui", "--max-new-tokens", "4", "--max-n", "4", *flags])
    service = build_service(cfg)
    server = serve_in_thread(cfg, service)
    try:
        yield server.url
    finally:
        server.stop()
        service.engine.shutdown()


def fuzz(url: str, examples: int, headers: dict[str, str]) -> dict[str, Any]:
    statuses: Counter[str] = Counter()
    found: list[dict[str, Any]] = []
    with httpx.Client(base_url=url, timeout=120, headers=headers) as http:
        before = http.post("/v1/chat/completions", json=REFERENCE).json()["choices"][0]["message"]["content"]
        started = time.perf_counter()

        @settings(max_examples=examples, deadline=None, database=None, suppress_health_check=list(HealthCheck))
        @given(request=requests)
        def run(request: tuple[str, bytes]) -> None:
            route, raw = request
            r = http.post(ROUTES[route], content=raw)
            statuses[f"{route} {r.status_code}"] += 1
            wrong = problems(route, r.status_code, r.headers.get("content-type", ""), r.text)
            if wrong:
                found.append(
                    {
                        "route": route,
                        "status": r.status_code,
                        "problems": wrong,
                        "body": raw[:300].decode("utf-8", "replace"),
                        "answer": r.text[:300],
                    }
                )

        run()
        elapsed = time.perf_counter() - started
        health = http.get("/health").status_code
        after = http.post("/v1/chat/completions", json=REFERENCE).json()["choices"][0]["message"]["content"]
    return {
        "requests": sum(statuses.values()),
        "seconds": round(elapsed, 1),
        "statuses": dict(sorted(statuses.items())),
        "5xx": sum(n for k, n in statuses.items() if k.split()[1].startswith("5")),
        "problems": found[:20],
        "problem_count": len(found),
        "health_after": health,
        "reference_unchanged": before == after,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=2000)
    parser.add_argument("--url", default="", help="a running server (default: start one in this process)")
    parser.add_argument("--api-key", default="", help="Bearer key for a server with --api-keys")
    args = parser.parse_args()
    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    with contextlib.ExitStack() as stack:
        url = args.url or stack.enter_context(local_server())
        report = fuzz(url, args.examples, headers)
    print(json.dumps(report, indent=2, ensure_ascii=False))
    ok = not report["problem_count"] and report["health_after"] == 200 and report["reference_unchanged"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
