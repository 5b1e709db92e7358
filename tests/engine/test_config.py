"""Every spec knob has a flag and an environment variable; the flag wins; bad values are refused."""

from __future__ import annotations

import dataclasses
import typing

import pytest

from engine import config as cfg
from engine.cli import build_parser, settings_from
from engine.http.exposure import check_exposure


def test_every_spec_knob_has_a_flag_and_an_env_var() -> None:
    spec_knobs = {f.name for f in dataclasses.fields(cfg.Settings) if f.metadata.get("spec")}
    assert {
        "max_request_length_mb",
        "api_keys",
        "media_allow_local",
        "perf_stats",
        "pangu_strict_limits",
        "chat_template_dir",
        "audio_transcription",
        "pangu_v1_usage_event",
    } <= spec_knobs
    help_text = build_parser().format_help()
    for name in spec_knobs:
        assert cfg.cli_flag(name) in help_text
        assert cfg.env_var(name) in help_text


def test_flag_beats_env_and_types_are_parsed() -> None:
    env = {"PLAYGROUND_MAX_QUEUE": "7", "PLAYGROUND_PERF_STATS": "false", "PLAYGROUND_API_KEYS": "a, b"}
    s = settings_from(["--max-queue", "9"], environ=env)
    assert (s.max_queue, s.perf_stats, s.api_keys) == (9, False, ["a", "b"])
    assert settings_from(["--perf-stats"], environ=env).perf_stats is True
    assert settings_from(["--no-pangu-strict-limits"], environ={}).pangu_strict_limits is False


def test_audio_transcription_defaults_on_only_for_the_bundled_model() -> None:
    assert settings_from([], environ={}).audio_transcription is True
    assert settings_from(["--model", "x.gguf"], environ={}).audio_transcription is False


@pytest.mark.parametrize(
    "argv",
    [["--max-request-length-mb", "0"], ["--max-request-length-mb", "101"], ["--media-allow-local"], ["--max-n", "0"]],
)
def test_impossible_settings_are_refused(argv: list[str]) -> None:
    with pytest.raises(ValueError):
        settings_from(argv, environ={})


def test_bad_env_boolean_is_refused() -> None:
    with pytest.raises(ValueError, match="PLAYGROUND_PERF_STATS"):
        settings_from([], environ={"PLAYGROUND_PERF_STATS": "maybe"})


def test_public_bind_without_credentials_refuses_to_start(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPACE_ID", raising=False)
    with pytest.raises(SystemExit, match="refusing"):
        check_exposure(settings_from(["--host", "0.0.0.0"], environ={}).http)
    check_exposure(settings_from(["--host", "0.0.0.0", "--api-keys", "k"], environ={}).http)
    check_exposure(settings_from(["--host", "0.0.0.0", "--insecure-public"], environ={}).http)
    check_exposure(settings_from(["--host", "127.0.0.1"], environ={}).http)


def test_spaces_default_host(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPACE_ID", raising=False)
    assert settings_from([], environ={}).bind_host == "127.0.0.1"
    monkeypatch.setenv("SPACE_ID", "user/space")
    assert settings_from([], environ={}).bind_host == "0.0.0.0"
    with pytest.raises(SystemExit, match="refusing"):  # a Space is a public bind: credentials or the override
        check_exposure(settings_from([], environ={}).http)
    check_exposure(settings_from([], environ={"PLAYGROUND_INSECURE_PUBLIC": "1"}).http)


@pytest.mark.parametrize(
    "argv",
    [
        ["--request-timeout-s", "-1"],
        ["--max-concurrent-per-client", "-2"],
        ["--shutdown-timeout-s", "-1"],
        ["--pangu-project-id", "a b"],
        ["--pangu-deployment-id", "x" * 129],
    ],
)
def test_impossible_serving_settings_are_refused(argv: list[str]) -> None:
    with pytest.raises(ValueError, match=argv[0]):
        settings_from(argv, environ={})


def test_serving_knobs_from_env_and_flags() -> None:
    env = {"PLAYGROUND_REQUEST_TIMEOUT_S": "5", "PLAYGROUND_LOG_MESSAGE_CONTENT": "yes"}
    s = settings_from(["--max-concurrent-per-client", "0"], environ=env)
    assert (s.request_timeout_s, s.log_message_content, s.max_concurrent_per_client) == (5, True, 0)
    assert settings_from([], environ={}).max_concurrent_per_client == 32


def test_lora_adapters_are_checked_before_start_up(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    import app

    def started(settings: cfg.Settings) -> None:
        raise AssertionError("app.main went on to start the server")

    monkeypatch.setattr(app, "configure_process", started)

    message = "--lora-adapters / PLAYGROUND_LORA_ADAPTERS: 'a' is not id=DIR"
    for argv, env in ((["--lora-adapters", "a"], {}), ([], {"PLAYGROUND_LORA_ADAPTERS": "a,b=/y"})):
        with pytest.raises(ValueError) as caught:
            settings_from(argv, environ=env)
        assert str(caught.value) == message
    assert settings_from(["--lora-adapters", "a=/x,b=/y"], environ={}).lora_adapters == ["a=/x", "b=/y"]
    # the files are read before anything is loaded or bound (engine/core/lora.py preflight), without a traceback
    with pytest.raises(SystemExit, match=f"app.py: error: adapter 'a': {tmp_path}/adapter_config.json is missing"):
        app.main(["--lora-adapters", f"a={tmp_path}"])
    assert settings_from(["--lora-adapters", " , "], environ={"PLAYGROUND_LORA_ADAPTERS": ""}).lora_adapters == []


def test_variables_are_checked_like_flags() -> None:
    with pytest.raises(ValueError) as caught:
        settings_from([], environ={"PLAYGROUND_DEVICE": "tpu"})
    assert str(caught.value) == "PLAYGROUND_DEVICE must be one of auto, npu, cuda, mps, cpu, got 'tpu'"
    with pytest.raises(ValueError) as caught:
        settings_from([], environ={"PLAYGROUND_MAX_QUEUE": "7.5"})
    assert str(caught.value) == "PLAYGROUND_MAX_QUEUE must be an integer, got '7.5'"
    assert settings_from([], environ={"PLAYGROUND_MAX_QUEUE": " 7 "}).max_queue == 7


def test_one_table_reads_every_field_by_its_annotation() -> None:
    kinds = {knob.name: knob.kind for knob in cfg.KNOBS}
    assert [knob.name for knob in cfg.KNOBS] == [f.name for f in dataclasses.fields(cfg.Settings)]
    assert (kinds["audio_transcription"], kinds["max_queue"], kinds["api_keys"], kinds["model"]) == (
        bool,
        int,
        list[str],
        str,
    )
    with pytest.raises(TypeError, match="Settings.ratio: no parser"):
        cfg._kind("ratio", float)  # a new field of a type the table cannot read fails at import, not at run time


PARTS = (cfg.EngineSettings, cfg.ServingSettings, cfg.HttpSettings, cfg.PageSettings)


def test_every_knob_is_in_a_layer_part_under_its_own_name_and_type() -> None:
    whole = typing.get_type_hints(cfg.Settings)
    hints = [typing.get_type_hints(part) for part in PARTS]
    assert set(whole) == set().union(*hints)  # no knob left out of every part, no part field that is not a knob
    for part in hints:
        assert {name: whole[name] for name in part} == part


def test_a_part_carries_the_whole_values_and_replaces_by_the_flat_names() -> None:
    s = cfg.Settings(max_n=3, host="0.0.0.0", api_keys=["k"], device="cpu", remote_backend_urls=["http://a:1/v1"])
    assert (s.serving.max_n, s.http.max_n, s.engine.device, s.serving.api_keys) == (3, 3, "cpu", ["k"])
    assert s.http.reachable_from_outside and s.page.reachable_from_outside and s.http.bind_host == "0.0.0.0"
    assert s.page.remote_backend_urls == ["http://a:1/v1"]
    assert s.serving.replace(max_n=5).max_n == 5 and s.replace(max_n=5).serving == s.serving.replace(max_n=5)
    assert isinstance(s.serving, cfg.Credentials) and isinstance(s.serving, cfg.MediaSettings)
