"""Does the bundled model answer simple questions at the page's defaults? (issue 30: >= 9 of 10 tries correct)

Starts the real app (API + page) on the bundled model in this process, asks each of ten fixed questions `--tries` times
through `/v1/chat/completions` with the sampling fields the page starts with for this model
(`playground.client.controls.model_defaults`), and grades each reply with a pattern. Prints one line per question and
the total; `--preset Balanced` (or any page preset) measures another starting point for comparison.

    .venv/bin/python bench/demo_answers.py [--tries 10] [--preset "Balanced"] [--max-tokens N]
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import engine  # noqa: F401  (process settings before torch)
from engine import config as cfg
from playground.client import controls

QUESTIONS = (
    ("What is the capital of France?", r"\bParis\b"),
    ("What is 2+2?", r"\b4\b|\bfour\b"),
    ("What are the colours of the rainbow?", r"(?is)red.*orange.*yellow.*green.*blue"),
    ("How many days are in a week?", r"\b7\b|\bseven\b"),
    ("What is the largest planet in our solar system?", r"\bJupiter\b"),
    ("At what temperature does water boil, in degrees Celsius?", r"\b100\b"),
    ("Who wrote Romeo and Juliet?", r"\bShakespeare\b"),
    ("What is the chemical formula of water?", r"H2O|H₂O"),
    ("How many legs does a spider have?", r"\b8\b|\beight\b"),
    ("What is the opposite of hot?", r"\bcold\b"),
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tries", type=int, default=10)
    parser.add_argument("--preset", default=None, help="a page preset instead of the model's starting one")
    parser.add_argument("--max-tokens", type=int, default=None)
    args = parser.parse_args()
    from app import build_service, serve_in_thread

    settings = cfg.Settings()
    service = build_service(settings)
    info = service.model
    preset, values = controls.model_defaults(info.parameters, info.generation_config)
    if args.preset:
        preset, values = args.preset, {**values, **controls.PRESETS[args.preset]}
    if args.max_tokens:
        values["max_tokens"] = args.max_tokens
    fields = {k: v for k, v in values.items() if not (k == "top_k" and v == -1)}
    print(f"model {info.name} ({info.parameters / 1e6:.0f} M parameters), preset {preset}, fields {fields}")
    server = serve_in_thread(settings, service)
    right = total = 0
    started = time.perf_counter()
    try:
        with httpx.Client(base_url=server.url, timeout=300) as client:
            for question, pattern in QUESTIONS:
                good = 0
                answer = ""
                for seed in range(args.tries):
                    body = {
                        "model": info.name,
                        "messages": [{"role": "user", "content": question}],
                        "seed": seed,
                        **fields,
                    }
                    reply = client.post("/v1/chat/completions", json=body).json()
                    answer = reply["choices"][0]["message"]["content"] or ""
                    good += bool(re.search(pattern, answer))
                right += good
                total += args.tries
                print(f"{good:2d}/{args.tries}  {question}  -> {answer[:90]!r}")
    finally:
        server.stop()
    print(f"total {right}/{total} correct ({100 * right / total:.0f}%) in {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
