"""Cross-backend equivalence against any OpenAI-compatible server (issue 21, point 3).

Sends a set of prompts greedily to the server at --url and to the embedded engine (or to a second URL with
--against), with logprobs, and prints per prompt the verdict of playground/client/equivalence.py: identical, same text
in other tokens, the first reply token where they diverge (with both sides' tokens), or that the rendered prompts
already differ (token ids through each side's /tokenize where it has one). A summary line counts the verdicts and
gives the largest logprob difference over the agreeing prefixes.

    .venv/bin/python bench/equivalence.py --url http://127.0.0.1:8002 [--model NAME] [--prompts 16] [--max-tokens 32]
        [--against http://127.0.0.1:7860] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# Sixteen short prompts of different kinds: facts, lists, code, a system prompt, an instruction to format.
PROMPTS: list[object] = [
    "What is the capital of France?",
    "Name three primary colours.",
    "Count from one to ten in words.",
    "Write a haiku about the sea.",
    "Explain what a noun is in one sentence.",
    "Translate 'good morning' into Spanish.",
    "Write a Python function that adds two numbers.",
    "List the days of the week.",
    [
        {"role": "system", "content": "You answer in exactly one sentence."},
        {"role": "user", "content": "Why is the sky blue?"},
    ],
    "What is 12 times 12?",
    "Give me a synonym for 'happy'.",
    "Describe a cat to a child.",
    "What does HTTP stand for?",
    'Reply with a JSON object with keys "name" and "age" for a person called Ada, aged 36.',
    "Summarise the water cycle in two sentences.",
    "Say hello.",
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", required=True, help="the server to check (with or without /v1)")
    ap.add_argument("--model", default=None, help="its model id (default: the first /v1/models lists)")
    ap.add_argument("--against", default="embedded", help="'embedded' (this project's engine, built here) or a URL")
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--json", default=None, help="write every verdict, both sides' tokens and logprobs, here")
    args = ap.parse_args()

    from playground.client import equivalence
    from playground.client.backend import LocalBackend
    from playground.client.remote import RemoteBackend

    checked = RemoteBackend(args.url, model=args.model)
    service = None
    if args.against == "embedded":
        from app import build_service, settings_from

        service = build_service(settings_from([], environ={}))
        reference = LocalBackend(service)
    else:
        reference = RemoteBackend(args.against)
    prompts = PROMPTS[: args.prompts]
    try:
        verdicts = equivalence.run_sync(
            equivalence.acompare_set(reference, checked, prompts, max_tokens=args.max_tokens)
        )
    finally:
        if service is not None:
            service.engine.shutdown()
    print(f"a = {reference!r}\nb = {checked!r} (model {checked.model})\n")
    print(f"{'#':>2}  {'verdict':<28} {'prompt a/b':>10} {'tokens a/b':>10} {'max |Δlogprob|':>14}  at the divergence")
    for i, v in enumerate(verdicts):
        r = v.row()
        where = f"a {r['token_a']!r} / b {r['token_b']!r}" if v.diverge_at is not None else ""
        diff = "" if v.max_logprob_diff is None else f"{v.max_logprob_diff:.2e}"
        print(
            f"{i:>2}  {v.verdict:<28} {r['prompt_tokens_a']!s:>4}/{r['prompt_tokens_b']!s:<5} "
            f"{r['tokens_a']:>4}/{r['tokens_b']:<5} {diff:>14}  {where}{r['error'] or ''}"
        )
    print("\nsummary:", json.dumps(equivalence.summary(verdicts)))
    if args.json:
        Path(args.json).write_text(json.dumps([v.as_json() for v in verdicts], indent=1, ensure_ascii=False))


if __name__ == "__main__":
    main()
