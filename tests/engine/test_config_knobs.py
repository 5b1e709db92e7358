"""Every knob, pinned knob by knob: its flag (and `--no-` form), its variable, its type, its default, its help text,
and how flags, variables and defaults combine. Written against the settings reader before it was rebuilt on one
table, so the rebuild is checked against the old behaviour."""

from __future__ import annotations

import dataclasses
import sys

import pytest

from engine import config as cfg
from engine.cli import build_parser, settings_from

BOOLS = {
    "graph_capture",
    "adaptive_threads",
    "ui",
    "insecure_public",
    "mcp",
    "log_message_content",
    "pangu_strict_limits",
    "perf_stats",
    "full_text_enabled",
    "media_allow_data_urls",
    "media_allow_local",
    "media_allow_remote",
    "chat_template_allow_path",
    "use_model_generation_config",
    "audio_transcription",
    "pangu_v1_usage_event",
}
INTS = {
    "port",
    "threads",
    "max_num_seqs",
    "max_model_len",
    "kv_cache_tokens",
    "prefix_cache_tokens",
    "max_batched_tokens",
    "step_log",
    "speculative_ngram",
    "max_concurrent_per_client",
    "request_timeout_s",
    "shutdown_timeout_s",
    "read_timeout_s",
    "max_request_length_mb",
    "max_input_tokens",
    "max_new_tokens",
    "max_n",
    "max_queue",
    "models_memory_mb",
}
LISTS = {
    "models",
    "remote_backend_urls",
    "lora_adapters",
    "api_keys",
    "admin_keys",
    "pangu_auth_tokens",
    "pangu_app_codes",
    "pangu_aksk",
    "media_remote_allowed_domains",
}
CHOICES = {
    "device": ("auto", "npu", "cuda", "mps", "cpu"),
    "dtype": ("auto", "bf16", "fp16", "fp32"),
    "quantization": ("auto", "none", "int8", "int4"),
    "kv_cache_dtype": ("auto", "fp32", "bf16"),
    "enable_reasoning": ("auto", "true", "false"),
    "tool_call_parser": ("auto", "hermes", "chatglm3", "none"),
    "prefix_cache_scope": ("credential", "shared"),
}
DEFAULTS = {
    "host": "",
    "port": 7860,
    "model": "",
    "models": [],
    "models_dir": "",
    "models_memory_mb": 0,
    "device": "auto",
    "dtype": "auto",
    "graph_capture": False,
    "quantization": "auto",
    "kv_cache_dtype": "auto",
    "cache_dir": "",
    "threads": 0,
    "adaptive_threads": True,
    "ui": True,
    "insecure_public": False,
    "mcp": False,
    "remote_backend_urls": [],
    "max_num_seqs": 32,
    "max_model_len": 0,
    "kv_cache_tokens": 65536,
    "prefix_cache_tokens": 4096,
    "max_batched_tokens": 256,
    "step_log": 4096,
    "speculative_ngram": 4,
    "prefix_cache_scope": "credential",
    "max_concurrent_per_client": 32,
    "request_timeout_s": 600,
    "shutdown_timeout_s": 30,
    "read_timeout_s": 30,
    "log_message_content": False,
    "served_model_name": "",
    "lora_adapters": [],
    "api_keys": [],
    "admin_keys": [],
    "pangu_auth_tokens": [],
    "pangu_app_codes": [],
    "pangu_aksk": [],
    "pangu_project_id": "",
    "pangu_deployment_id": "",
    "pangu_strict_limits": True,
    "max_request_length_mb": 4,
    "max_input_tokens": 0,
    "max_new_tokens": 512,
    "max_n": 8,
    "max_queue": 64,
    "perf_stats": True,
    "full_text_enabled": False,
    "enable_reasoning": "auto",
    "thinking_early_stop_text": "\n\nConsidering the limited time, I have to give the solution directly now.\n</think>\n\n",
    "tool_call_parser": "auto",
    "media_allow_data_urls": True,
    "media_allow_local": False,
    "media_local_root": "",
    "media_allow_remote": False,
    "media_remote_allowed_domains": [],
    "chat_template_allow_path": False,
    "chat_template_dir": "",
    "use_model_generation_config": False,
    "audio_transcription": None,
    "moderation_hook": "",
    "pangu_v1_usage_event": False,
}
NAMES = [f.name for f in dataclasses.fields(cfg.Settings)]
# What a flag / variable value looks like for each kind, and what it turns into (lora_adapters: id=DIR entries, test_config.py).
SAMPLES = {"int": ("3", 3), "list": (" a, b,,c ", ["a", "b", "c"]), "str": (" x@y ", " x@y ")}


def kind(name: str) -> str:
    return "bool" if name in BOOLS else "int" if name in INTS else "list" if name in LISTS else "str"


def sample(name: str) -> tuple[str, object]:
    if name in CHOICES:
        return CHOICES[name][-1], CHOICES[name][-1]
    if name in ("pangu_project_id", "pangu_deployment_id"):
        return "p_1-X", "p_1-X"
    return SAMPLES[kind(name)]


def companion(name: str) -> list[str]:  # what a switch needs beside it to pass the validation
    return {
        "media_allow_local": ["--media-local-root", "d"],
        "chat_template_allow_path": ["--chat-template-dir", "d"],
    }.get(name, [])


def test_the_knob_table_is_the_one_pinned_here() -> None:
    assert set(NAMES) == set(DEFAULTS)
    assert {
        n: f.metadata.get("choices") for f in dataclasses.fields(cfg.Settings) if (n := f.name) in CHOICES
    } == CHOICES
    assert {**dataclasses.asdict(cfg.Settings())} == DEFAULTS
    assert {**dataclasses.asdict(settings_from([], environ={}))} == {**DEFAULTS, "audio_transcription": True}


def test_flag_and_variable_spelling() -> None:
    assert cfg.cli_flag("max_request_length_mb") == "--max-request-length-mb"
    assert cfg.env_var("max_request_length_mb") == "PLAYGROUND_MAX_REQUEST_LENGTH_MB"
    actions = {a.dest: a for a in build_parser()._actions if a.dest != "help"}
    assert list(actions) == NAMES
    for name, action in actions.items():
        flag = "--" + name.replace("_", "-")
        assert action.option_strings == ([flag, "--no-" + flag[2:]] if name in BOOLS else [flag])
        assert action.default is None and action.choices == CHOICES.get(name)
        meta_help = next(f for f in dataclasses.fields(cfg.Settings) if f.name == name).metadata["help"]
        suffix = " (comma-separated)" if name in LISTS else ""
        assert action.help == f"{meta_help} [env PLAYGROUND_{name.upper()}]{suffix}"
    assert actions["pangu_aksk"].help == (
        "AK:SK pairs whose SDK-HMAC-SHA256 signatures (Huawei Cloud SDKs) Pangu V1 accepts; @FILE reads them. "
        "[env PLAYGROUND_PANGU_AKSK] (comma-separated)"
    )
    assert build_parser().description == "LLM Playground: chat UI + MindIE-compatible API"


@pytest.mark.parametrize("name", [n for n in NAMES if n not in BOOLS and n != "lora_adapters"])
def test_value_flags_and_variables_parse_to_the_field_type(name: str) -> None:
    raw, value = sample(name)
    flag, var = cfg.cli_flag(name), cfg.env_var(name)
    assert getattr(settings_from([flag, raw], environ={}), name) == value
    assert getattr(settings_from([f"{flag}={raw}"], environ={}), name) == value
    assert getattr(settings_from([], environ={var: raw}), name) == value
    # precedence: flag over variable over default
    other = "7" if name in INTS else CHOICES[name][0] if name in CHOICES else "zz"
    assert getattr(settings_from([flag, other], environ={var: raw}), name) != value
    assert getattr(settings_from([flag, raw], environ={var: other}), name) == value


@pytest.mark.parametrize("name", sorted(BOOLS))
def test_boolean_flags_and_variables(name: str) -> None:
    flag, var, more = cfg.cli_flag(name), cfg.env_var(name), companion(name)
    no = "--no-" + flag[2:]
    assert getattr(settings_from([flag, *more], environ={}), name) is True
    assert getattr(settings_from([no, *more], environ={}), name) is False
    for raw in ("1", "true", "YES", " On "):
        assert getattr(settings_from(more, environ={var: raw}), name) is True
        assert getattr(settings_from([no, *more], environ={var: raw}), name) is False
    for raw in ("0", "False", "no", "off\n"):
        assert getattr(settings_from(more, environ={var: raw}), name) is False
        assert getattr(settings_from([flag, *more], environ={var: raw}), name) is True
    for raw in ("", "maybe", "2"):
        with pytest.raises(ValueError) as caught:
            settings_from([flag, *more], environ={var: raw})  # a bad variable is refused even under a flag
        assert str(caught.value) == f"{var} must be a boolean, got {raw!r}"


def test_lists_empty_repeated_and_at_forms_stay_raw() -> None:
    assert settings_from([], environ={"PLAYGROUND_API_KEYS": ""}).api_keys == []
    assert settings_from(["--api-keys", " , "], environ={}).api_keys == []
    assert settings_from(["--api-keys", "a", "--api-keys", "b,c"], environ={}).api_keys == ["b", "c"]  # last wins
    s = settings_from(["--pangu-aksk", "@/k.txt, A:B"], environ={"PLAYGROUND_API_KEYS": "@x"})
    assert (s.pangu_aksk, s.api_keys) == (["@/k.txt", "A:B"], ["@x"])  # the AK/SK loader reads @FILE, not the parser
    assert settings_from([], environ={"PLAYGROUND_MODEL": ""}).model == ""


def test_bad_values_are_refused() -> None:
    for argv in (["--max-queue", "x"], ["--device", "tpu"], ["--unknown-flag"], ["--perf-stats=1"], ["--max-queue"]):
        with pytest.raises(SystemExit):
            settings_from(argv, environ={})
    with pytest.raises(ValueError):
        settings_from([], environ={"PLAYGROUND_MAX_QUEUE": "x"})


def test_other_variables_are_ignored_and_defaults_read_the_process(monkeypatch: pytest.MonkeyPatch) -> None:
    assert settings_from([], environ={"PLAYGROUND_NOT_A_KNOB": "1", "MAX_QUEUE": "3"}) == settings_from([], environ={})
    monkeypatch.setenv("PLAYGROUND_MAX_QUEUE", "5")
    monkeypatch.setattr(sys, "argv", ["app.py", "--max-n", "3"])
    s = settings_from()
    assert (s.max_queue, s.max_n) == (5, 3)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--max-request-length-mb", "0"], "--max-request-length-mb must be in [1, 100]"),
        *[
            ([cfg.cli_flag(n), "0"], f"{cfg.cli_flag(n)} must be >= 1")
            for n in ("max_new_tokens", "max_n", "max_queue", "max_num_seqs", "kv_cache_tokens")
        ],
        *[
            ([cfg.cli_flag(n), "-1"], f"{cfg.cli_flag(n)} must be >= 0")
            for n in ("max_concurrent_per_client", "request_timeout_s", "shutdown_timeout_s")
        ],
        (["--pangu-project-id", "a/b"], "--pangu-project-id must match [A-Za-z0-9_-]{1,128}"),
        (["--pangu-deployment-id", "x" * 129], "--pangu-deployment-id must match [A-Za-z0-9_-]{1,128}"),
        (["--media-allow-local"], "--media-allow-local needs --media-local-root"),
        (["--chat-template-allow-path"], "--chat-template-allow-path needs --chat-template-dir"),
    ],
)
def test_validation_messages(argv: list[str], message: str) -> None:
    with pytest.raises(ValueError) as caught:
        settings_from(argv, environ={})
    assert str(caught.value) == message
    with pytest.raises(ValueError) as caught:  # the same settings from variables fail the same way
        env = {cfg.env_var(argv[0][2:].replace("-", "_")): argv[1] if len(argv) > 1 else "1"}
        settings_from([], environ=env)
    assert str(caught.value) == message


def test_validation_also_checks_settings_built_in_code() -> None:
    cfg.validate(cfg.Settings())
    with pytest.raises(ValueError, match="--max-n must be >= 1"):
        cfg.validate(cfg.Settings().replace(max_n=0))
    assert cfg.Settings().replace(port=1).port == 1
