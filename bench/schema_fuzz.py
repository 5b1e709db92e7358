"""Property-based run of every route in /openapi.json with schemathesis: does the server keep the document's word?

    .venv/bin/python bench/schema_fuzz.py --examples 300                 # an in-process server on the bundled model
    .venv/bin/python bench/schema_fuzz.py --examples 300 --url URL \\
        [--api-key KEY] [--pangu-token TOKEN]                            # any running instance of this server

Needs `schemathesis` (4.x) in the venv: `.venv/bin/pip install schemathesis==4.32.5`.

The in-process server caps generation at 4 tokens and n at 4 so that each example stays cheap, and turns on
credentials (a Bearer key, a Pangu token) so that 401 is exercised too: most examples send the right credential,
some none and some a wrong one. Per route and per generation mode (positive: bodies the schema allows; negative:
bodies it forbids) it reports the statuses seen and counts

* `5xx`: server errors,
* `undocumented`: a status the operation's `responses` do not list,
* `contradicts_schema`: a body, content type or header that its documented response contradicts,

all three of which must be 0 (exit status 1 otherwise, or when /health no longer answers 200), and, as figures:
`refused_as_documented` (a positive example with the right credential refused, which one of the request schema's
`x-refused-when` combinations names), `valid_refused` (refused although the document names no reason: the schema
promised more than validation keeps; 404 for an unknown id is not counted), with the most common error messages
in `refusal_reasons`, and `invalid_accepted` (a body the schema forbids, answered 2xx).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx
import requests
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from jsonschema import Draft202012Validator
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core.failures import FailureGroup
from schemathesis.core.parameters import ParameterLocation
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

API_KEY, PANGU_TOKEN = "schema-fuzz-key", "schema-fuzz-token"
CHECKS = {
    "5xx": not_a_server_error,
    "undocumented": status_code_conformance,
    "contradicts_schema": (response_schema_conformance, content_type_conformance, response_headers_conformance),
}
MUST_BE_ZERO = tuple(CHECKS)
FIGURES = ("valid_refused", "refused_as_documented", "invalid_accepted")
# Most examples carry the right credential; the rest none or a wrong one (401 must be documented and shaped).
CREDENTIALS = st.sampled_from(["ok"] * 8 + ["missing", "wrong"])


def local_server() -> contextlib.AbstractContextManager[str]:
    """fuzz_api.py's in-process server, with credentials on every route family."""
    from bench.fuzz_api import local_server as capped_server

    return capped_server("--api-keys", API_KEY, "--pangu-auth-tokens", PANGU_TOKEN)


def credential_headers(path: str, kind: str, key: str, token: str) -> dict[str, str]:
    """The headers of one credential choice for the route at `path` (§1.2)."""
    pangu_v1 = "/deployments/" in path
    if kind == "missing" or (kind == "ok" and not (token if pangu_v1 else key)):
        return {}
    secret = (token if pangu_v1 else key) if kind == "ok" else "wrong-secret"
    return {"X-Auth-Token": secret} if pangu_v1 else {"Authorization": f"Bearer {secret}"}


class Tally:
    """What one operation and generation mode produced."""

    def __init__(self) -> None:
        self.statuses: Counter[int] = Counter()
        self.counts: Counter[str] = Counter({name: 0 for name in (*MUST_BE_ZERO, *FIGURES)})
        self.examples: dict[str, list[dict[str, Any]]] = defaultdict(list)
        self.reasons: Counter[str] = Counter()  # why positive examples were refused (the error's first words)
        self.unsatisfiable = False

    def note(self, kind: str, case: Any, response: Any, detail: str) -> None:
        self.counts[kind] += 1
        if len(self.examples[kind]) < 3:
            body = case.body if isinstance(case.body, (dict, list, str, int, float, bool)) else repr(case.body)
            self.examples[kind].append(
                {
                    "status": response.status_code,
                    "path": case.formatted_path,
                    "body": json.dumps(body, ensure_ascii=False)[:300],
                    "answer": response.text[:300],
                    "detail": detail[:400],
                }
            )

    def report(self) -> dict[str, Any]:
        if self.unsatisfiable:
            return {"requests": 0, "statuses": {}, **self.counts, "examples": {}, "note": "nothing to negate"}
        return {
            "requests": sum(self.statuses.values()),
            "statuses": dict(sorted(self.statuses.items())),
            **self.counts,
            "refusal_reasons": dict(self.reasons.most_common(8)),
            "examples": dict(self.examples),
        }


def reason(text: str) -> str:
    """An error body's message without the value it quotes: what kind of refusal it was."""
    try:
        body = json.loads(text)
    except ValueError:
        return text[:60]
    message = body.get("error") if isinstance(body, dict) else None
    if isinstance(message, dict):  # Pangu V2
        message = message.get("message")
    if message is None and isinstance(body, dict) and body.get("details"):  # Pangu V1
        message = body["details"][0].get("error")
    return re.sub(r"\[\d+\]", "[i]", str(message).split(", got")[0])[:90]


def _failure(case: Any, response: Any, check: Any) -> str | None:
    """What one schemathesis check found wrong with this response, None when it passes."""
    try:
        case.validate_response(response, checks=[check])
    except (Exception, FailureGroup) as exc:  # a FailureGroup is no Exception
        found = getattr(exc, "exceptions", None) or [exc]
        return "; ".join(f"{getattr(f, 'title', type(f).__name__)}: {getattr(f, 'message', f)}" for f in found)
    return None


def refusal_rules(document: dict[str, Any], operation: Any) -> Callable[[Any], str]:
    """The description of the first `x-refused-when` entry of the operation's request schema that a body meets
    ("" for none): combinations the document says are refused, which JSON Schema proper leaves out."""
    content = (operation.definition.raw.get("requestBody") or {}).get("content", {}).get("application/json", {})
    target = content.get("schema", {})
    name = target.get("$ref", "").rpartition("/")[2]
    entries = document.get("components", {}).get("schemas", {}).get(name, {}).get("x-refused-when", [])
    rules = [(e["description"], Draft202012Validator({**document, **e})) for e in entries]
    return lambda body: next((text for text, rule in rules if rule.is_valid(body)), "")


def exercise(
    operation: Any,
    mode: GenerationMode,
    url: str,
    examples: int,
    key: str,
    token: str,
    session: requests.Session,
    refused_when: Callable[[Any], str],
) -> Tally:
    tally = Tally()

    @settings(max_examples=examples, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(case=operation.as_strategy(generation_mode=mode), credential=CREDENTIALS)
    def run(case: Any, credential: str) -> None:
        headers = credential_headers(operation.path, credential, key, token)
        response = case.call(base_url=url, session=session, headers=headers, timeout=120)
        tally.statuses[response.status_code] += 1
        for kind, checks in CHECKS.items():
            for check in checks if isinstance(checks, tuple) else (checks,):
                detail = _failure(case, response, check)
                if detail is not None:
                    tally.note(kind, case, response, detail)
                    break
        ok = 200 <= response.status_code < 300
        if mode.is_positive and credential == "ok" and not ok and response.status_code != 404:
            documented = refused_when(case.body)
            tally.note("refused_as_documented" if documented else "valid_refused", case, response, documented)
            if not documented:
                tally.reasons[reason(response.text)] += 1
        if mode.is_negative and ok and case.meta is not None and case.meta.is_negative_at(ParameterLocation.BODY):
            tally.note("invalid_accepted", case, response, "")

    try:
        run()
    except Unsatisfiable:  # negative mode on an operation with nothing to negate (GET /v1/models)
        tally.unsatisfiable = True
    return tally


def fuzz(url: str, examples: int, key: str, token: str) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    document = httpx.get(url + "/openapi.json", headers=headers, timeout=60).json()
    schema = schemathesis.openapi.from_dict(document)
    routes: dict[str, Any] = {}
    started = time.perf_counter()
    with requests.Session() as session:
        for result in schema.get_all_operations():
            operation = result.ok()
            refused_when = refusal_rules(document, operation)
            modes = {
                mode.value: exercise(operation, mode, url, examples, key, token, session, refused_when).report()
                for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
            }
            routes[operation.label] = modes
            print(
                operation.label,
                json.dumps({m: {k: r[k] for k in ("statuses", *MUST_BE_ZERO, *FIGURES)} for m, r in modes.items()}),
                file=sys.stderr,
                flush=True,
            )
    totals = {name: sum(mode[name] for modes in routes.values() for mode in modes.values()) for name in MUST_BE_ZERO}
    health = httpx.get(url + "/health", timeout=60).status_code
    return {
        "seconds": round(time.perf_counter() - started, 1),
        "examples_per_route_and_mode": examples,
        "totals": totals,
        "health_after": health,
        "routes": routes,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=300, help="examples per route and generation mode")
    parser.add_argument("--url", default="", help="a running server (default: start one in this process)")
    parser.add_argument("--api-key", default="", help="Bearer key of a server with --api-keys")
    parser.add_argument("--pangu-token", default="", help="X-Auth-Token of a server with --pangu-auth-tokens")
    parser.add_argument("--out", default="", help="also write the full report (with examples) to this file")
    args = parser.parse_args()
    key, token = (args.api_key, args.pangu_token) if args.url else (API_KEY, PANGU_TOKEN)
    with contextlib.ExitStack() as stack:
        url = args.url or stack.enter_context(local_server())
        report = fuzz(url.rstrip("/"), args.examples, key, token)
    text = json.dumps(report, indent=2, ensure_ascii=False)
    if args.out:
        Path(args.out).write_text(text + "\n", encoding="utf-8")
    print(text)
    return 0 if not any(report["totals"].values()) and report["health_after"] == 200 else 1


if __name__ == "__main__":
    sys.exit(main())
