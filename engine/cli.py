"""The command line: one flag per knob of the API contract (spec §0.1, `cfg.KNOBS`), read with the PLAYGROUND_*
variables into Settings; the flag wins. app.py parses `sys.argv` with it; a notebook or a test passes its own."""

from __future__ import annotations

import argparse
from collections.abc import Mapping

from engine import config as cfg


def build_parser() -> argparse.ArgumentParser:
    """One flag per knob of `cfg.KNOBS`, read by the same parser as its PLAYGROUND_* variable; unset flags stay None."""
    parser = argparse.ArgumentParser(description="LLM Playground: chat UI + MindIE-compatible API")
    for knob in cfg.KNOBS:
        help_text = f"{knob.help} [env {knob.env}]"
        if knob.name == "model":  # repeated: the first is served at start, the others join --models
            parser.add_argument(
                knob.flag, dest=knob.name, action="append", type=knob.parse, default=None, help=help_text
            )
        elif knob.kind is bool:
            parser.add_argument(
                knob.flag, dest=knob.name, action=argparse.BooleanOptionalAction, default=None, help=help_text
            )
        else:
            parser.add_argument(
                knob.flag,
                dest=knob.name,
                type=knob.parse,
                choices=knob.choices,
                default=None,
                help=help_text + (" (comma-separated)" if knob.kind == list[str] else ""),
            )
    return parser


def settings_from(argv: list[str] | None = None, environ: Mapping[str, str] | None = None) -> cfg.Settings:
    """Defaults, then the PLAYGROUND_* variables of `environ` (default os.environ), then the flags of `argv` (default
    sys.argv): the flag wins. Impossible settings raise ValueError (`cfg.validate`)."""
    flags = {name: value for name, value in vars(build_parser().parse_args(argv)).items() if value is not None}
    values = {**cfg.from_env(environ), **flags}
    if "model" in flags:
        first, *more = flags["model"]
        values |= {"model": first, "models": [*more, *values.get("models", [])]}
    settings = cfg.Settings(**values)
    if settings.audio_transcription is None:  # on for the bundled demo model, off for a --model
        settings = settings.replace(audio_transcription=not settings.model)
    cfg.validate(settings)
    return settings
