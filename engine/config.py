"""Server settings: one frozen dataclass, filled from defaults, environment variables and the command line.

Every knob of spec §0.1 is a field here, with its default and `_knob` help. `KNOBS` is those fields as the
outside sees them: the flag (`--max-queue`; `--perf-stats` / `--no-perf-stats` for a bool), the variable
(`PLAYGROUND_MAX_QUEUE`), the help, and the parser that the field's annotation picks from `PARSERS`.
`from_env` reads the variables through it and app.py builds its flags from it, so the two read text the same way
and can never drift apart.

`Settings` is the parsed whole, held by the composition root (app.py, engine/cli.py, engine/serving/factory.py and
model_catalog.py); each layer takes only its part (issue 34): `settings.engine` (EngineSettings: what builds a model's
engine), `.serving` (ServingSettings), `.http` (HttpSettings), `.page` (PageSettings). tests/test_architecture.py
keeps the whole out of the layers.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import re
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

ENV_PREFIX = "PLAYGROUND_"
PATH_SEGMENT = re.compile(r"[A-Za-z0-9_-]{1,128}")  # spec §1.1: Pangu V1 project_id / deployment_id


def _knob(default: Any, help: str, *, spec: bool = False, choices: tuple[str, ...] | None = None) -> Any:
    meta = {"help": help, "spec": spec, "choices": choices}
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: type(default)(default), metadata=meta)
    return field(default=default, metadata=meta)


def is_loopback(host: str) -> bool:
    if host in ("localhost", ""):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class Bound:
    """The bind that `host` names: the whole's and the parts' that read it (HTTP, page)."""

    host: str

    @property
    def bind_host(self) -> str:
        """The address a server with `--host HOST` binds: HOST, else 127.0.0.1 (0.0.0.0 on Hugging Face Spaces)."""
        if self.host:
            return self.host
        return "0.0.0.0" if os.environ.get("SPACE_ID") else "127.0.0.1"

    @property
    def reachable_from_outside(self) -> bool:
        """Whether the server listens beyond this machine (a non-loopback bind)."""
        return not is_loopback(self.bind_host)


@dataclass(frozen=True)
class Settings(Bound):
    # Where and what to serve.
    host: str = _knob("", "Bind address (default 127.0.0.1; 0.0.0.0 on Hugging Face Spaces).")
    port: int = _knob(7860, "TCP port for the API and the UI.")
    model: str = _knob(
        "",
        "Hugging Face model directory or .gguf file (default: the bundled SmolLM2-135M-Instruct); repeat it to "
        "offer more models, loaded on demand.",
    )
    models: list[str] = _knob(
        [], "More models the server can load on demand (directories or .gguf files); a repeated --model adds here."
    )
    models_dir: str = _knob("", "Directory whose model subdirectories and .gguf files can be loaded on demand.")
    models_memory_mb: int = _knob(
        0, "Memory the loaded models may take together, MiB, as weights + KV pool (0 = what is available, psutil)."
    )
    device: str = _knob("auto", "Device to run on.", choices=("auto", "npu", "cuda", "mps", "cpu"))
    dtype: str = _knob("auto", "Compute dtype.", choices=("auto", "bf16", "fp16", "fp32"))
    graph_capture: bool = _knob(
        False, "Capture decode steps as CUDA / NPU graphs and replay them (engine/core/graphs.py); not on CPU / MPS."
    )
    quantization: str = _knob(
        "auto",
        "How the linear projections' weights are kept (vLLM's flag): auto (a GGUF's own Q4_0 / Q4_1 / Q4_K / Q8_0 "
        "blocks where the CPU kernels take them, else as loaded), none (dequantized), int8 or int4 (groups of 32), "
        "quantized at load.",
        choices=("auto", "none", "int8", "int4"),
    )
    kv_cache_dtype: str = _knob(
        "auto",
        "Element type of the KV cache's pages (vLLM's flag): auto (bf16 on a CPU with the kernels, which read bf16 "
        "pages in place: half the bytes; else the compute dtype), fp32 or bf16.",
        choices=("auto", "fp32", "bf16"),
    )
    cache_dir: str = _knob("", "Where fetched and converted weights are cached (default ~/.cache/llm-playground).")
    threads: int = _knob(0, "torch intra-op threads (0 = one per core).")
    adaptive_threads: bool = _knob(
        True, "CPU: the engine runs its steps on fewer threads while another process keeps cores busy."
    )
    ui: bool = _knob(True, "Mount the Gradio playground at /.")
    insecure_public: bool = _knob(False, "Allow binding a non-loopback address with no credentials configured.")
    mcp: bool = _knob(
        False, "Also serve the page's chat as an MCP tool at /mcp/gradio_api/mcp/ (a public bind needs credentials)."
    )
    remote_backend_urls: list[str] = _knob(
        [], "Base URLs the page's Backend tab may connect to (empty: any URL on a loopback bind, none otherwise)."
    )
    # Engine capacity.
    max_num_seqs: int = _knob(32, "Most sequences decoded together in one step.")
    max_model_len: int = _knob(0, "Context length in tokens (0 = the model's own).")
    kv_cache_tokens: int = _knob(65536, "KV-cache budget in tokens over all running sequences.")
    prefix_cache_tokens: int = _knob(4096, "Prompt-prefix KV kept for reuse across requests, in tokens (0 = off).")
    prefix_cache_scope: str = _knob(
        "credential",
        "Who shares cached prompt prefixes: 'credential' (only requests with the same credential; with no credentials "
        "configured, everyone) or 'shared' (everyone: cached_tokens then tells one client of another's prompts).",
        choices=("credential", "shared"),
    )
    max_batched_tokens: int = _knob(256, "Prompt tokens prefilled per engine step beside the running decodes.")
    step_log: int = _knob(4096, "Engine step records kept for the scheduler x-ray and /server/steps (0 = off).")
    speculative_ngram: int = _knob(
        4,
        "Speculative decoding by prompt lookup: up to K n-gram drafts verified per step, for greedy requests "
        "(0 = off); any request may ask with speculative: true.",
    )
    # Serving hygiene (issue 6): limits per client and per request, shutdown, logging.
    max_concurrent_per_client: int = _knob(
        32, "Chat requests one client (credential, else IP address) may have in flight (0 = no limit)."
    )
    request_timeout_s: int = _knob(600, "Wall-clock budget of one chat request in seconds (0 = none).")
    shutdown_timeout_s: int = _knob(30, "On SIGTERM, seconds in-flight requests get to finish before being ended.")
    read_timeout_s: int = _knob(
        30,
        "Seconds a client has to send a request's headers, and the longest pause while it sends the body; past it "
        "408 and the connection closes (nginx's client_header_timeout / client_body_timeout; 0 = none).",
    )
    log_message_content: bool = _knob(False, "Put message text into the access log (off: sizes and counts only).")
    # Knobs of spec §0.1.
    served_model_name: str = _knob("", "Name `model` must match (default: model directory or file stem).", spec=True)
    lora_adapters: list[str] = _knob(
        [],
        "LoRA adapters as id=DIR (PEFT adapter_config.json + adapter_model.safetensors); each id is a model.",
        spec=True,
    )
    api_keys: list[str] = _knob([], "Bearer keys accepted on /v1 and Pangu V2 (empty = auth off).", spec=True)
    admin_keys: list[str] = _knob(
        [], "Bearer keys of administrators: once any credentials are set, only these reset the prefix cache."
    )
    pangu_auth_tokens: list[str] = _knob([], "Tokens accepted in X-Auth-Token on Pangu V1.", spec=True)
    pangu_app_codes: list[str] = _knob([], "Codes accepted in X-Apig-AppCode on Pangu V1.", spec=True)
    pangu_aksk: list[str] = _knob(
        [], "AK:SK pairs whose SDK-HMAC-SHA256 signatures (Huawei Cloud SDKs) Pangu V1 accepts; @FILE reads them."
    )
    pangu_project_id: str = _knob("", "When set, the Pangu V1 project_id must equal it.", spec=True)
    pangu_deployment_id: str = _knob("", "When set, the Pangu V1 deployment_id must equal it.", spec=True)
    pangu_strict_limits: bool = _knob(True, "Apply the narrower Pangu ranges on Pangu routes.", spec=True)
    max_request_length_mb: int = _knob(4, "Cap on the HTTP body and serialized messages, MiB (1..100).", spec=True)
    max_input_tokens: int = _knob(0, "Cap on prompt tokens (0 = context length - 1).", spec=True)
    max_new_tokens: int = _knob(512, "Default and upper cap of max_tokens.", spec=True)
    max_n: int = _knob(8, "Largest n / best_of / beam width.", spec=True)
    max_queue: int = _knob(64, "Requests waiting + running before 503.", spec=True)
    perf_stats: bool = _knob(True, "Emit MindIE timing extras on /v1.", spec=True)
    full_text_enabled: bool = _knob(False, "MindIE fullTextEnabled streaming mode.", spec=True)
    enable_reasoning: str = _knob("auto", "Reasoning split.", spec=True, choices=("auto", "true", "false"))
    thinking_early_stop_text: str = _knob(
        "\n\nConsidering the limited time, I have to give the solution directly now.\n</think>\n\n",
        "Text forced when a request's thinking_budget is spent (MindIE early_stopping_text); ends the reasoning.",
    )
    tool_call_parser: str = _knob(
        "auto", "Tool-call parser.", spec=True, choices=("auto", "hermes", "chatglm3", "none")
    )
    media_allow_data_urls: bool = _knob(True, "Accept inline base64 / data URLs.", spec=True)
    media_allow_local: bool = _knob(False, "Accept server-local media files under --media-local-root.", spec=True)
    media_local_root: str = _knob("", "Only directory local media may come from.", spec=True)
    media_allow_remote: bool = _knob(False, "Fetch remote http(s) media from allow-listed hosts.", spec=True)
    media_remote_allowed_domains: list[str] = _knob([], "Hosts remote media may come from.", spec=True)
    chat_template_allow_path: bool = _knob(
        False, "Accept chat_template file names under --chat-template-dir.", spec=True
    )
    chat_template_dir: str = _knob("", "Only directory chat_template files may come from.", spec=True)
    use_model_generation_config: bool = _knob(False, "Unset sampling fields take generation_config.json.", spec=True)
    audio_transcription: bool | None = _knob(None, "Transcribe audio for models without audio input.", spec=True)
    moderation_hook: str = _knob(
        "", "Moderation plugin as module:callable, or wordlist:FILE.json (glossary name -> words).", spec=True
    )
    pangu_v1_usage_event: bool = _knob(False, "Emit the event: usage line on Pangu V1 streams.", spec=True)

    def replace(self, **changes: Any) -> Settings:
        return dataclasses.replace(self, **changes)

    def part(self, kind: type[P]) -> P:
        """The fields of `kind` (one layer's part, below), with this whole's values."""
        return kind(**{f.name: getattr(self, f.name) for f in dataclasses.fields(kind)})

    @property
    def engine(self) -> EngineSettings:
        return self.part(EngineSettings)

    @property
    def serving(self) -> ServingSettings:
        return self.part(ServingSettings)

    @property
    def http(self) -> HttpSettings:
        return self.part(HttpSettings)

    @property
    def page(self) -> PageSettings:
        return self.part(PageSettings)


# Each layer's part of Settings (issue 34): the fields it reads, under the same names and types, taken from the parsed
# whole by `Settings.part` at the composition root (app.py, engine/serving/factory.py, engine/serving/model_catalog.py).
# A field two layers read is in both parts; tests/engine/test_config.py checks every field is in a part, with its type.
P = typing.TypeVar("P", bound="Part")


@dataclass(frozen=True)
class Part:
    def replace(self: P, **changes: Any) -> P:
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True)
class Credentials(Part):
    """Who may call the server: what engine/serving/rights.py reads, in the serving and the HTTP parts."""

    api_keys: list[str]
    admin_keys: list[str]
    pangu_auth_tokens: list[str]
    pangu_app_codes: list[str]
    pangu_aksk: list[str]


@dataclass(frozen=True)
class MediaSettings(Part):
    """Where media may come from: what engine/media/loader.py reads."""

    media_allow_data_urls: bool
    media_allow_local: bool
    media_local_root: str
    media_allow_remote: bool
    media_remote_allowed_domains: list[str]


@dataclass(frozen=True)
class EngineSettings(Part):
    """What builds a model's engine (engine/serving/factory.py, model_catalog.py hand engine/core the values)."""

    model: str
    models: list[str]
    models_dir: str
    models_memory_mb: int
    device: str
    dtype: str
    graph_capture: bool
    quantization: str
    kv_cache_dtype: str
    cache_dir: str
    threads: int
    adaptive_threads: bool
    max_num_seqs: int
    max_model_len: int
    kv_cache_tokens: int
    prefix_cache_tokens: int
    max_batched_tokens: int
    step_log: int
    speculative_ngram: int
    max_queue: int
    served_model_name: str
    lora_adapters: list[str]
    tool_call_parser: str


@dataclass(frozen=True)
class ServingSettings(Credentials, MediaSettings):
    """What engine/serving reads: a request's limits, prompt, sampling defaults, reasoning, moderation, admission."""

    served_model_name: str
    cache_dir: str
    tool_call_parser: str
    audio_transcription: bool | None
    max_request_length_mb: int
    max_input_tokens: int
    max_new_tokens: int
    max_n: int
    speculative_ngram: int
    use_model_generation_config: bool
    chat_template_allow_path: bool
    chat_template_dir: str
    enable_reasoning: str
    thinking_early_stop_text: str
    request_timeout_s: int
    max_concurrent_per_client: int
    log_message_content: bool
    moderation_hook: str
    prefix_cache_scope: str


@dataclass(frozen=True)
class HttpSettings(Credentials, Bound):
    """What engine/http reads: the bind, the routes' credentials and limits, the wire's extras."""

    host: str
    port: int
    ui: bool
    mcp: bool
    insecure_public: bool
    read_timeout_s: int
    shutdown_timeout_s: int
    max_request_length_mb: int
    prefix_cache_scope: str
    pangu_project_id: str
    pangu_deployment_id: str
    pangu_strict_limits: bool
    pangu_v1_usage_event: bool
    perf_stats: bool
    full_text_enabled: bool
    audio_transcription: bool | None
    max_new_tokens: int
    max_n: int


@dataclass(frozen=True)
class PageSettings(Part, Bound):
    """What the page (playground/page) reads beside the service's part: where its Backend tab may connect."""

    host: str
    remote_backend_urls: list[str]


def cli_flag(name: str) -> str:
    return "--" + name.replace("_", "-").replace(".", "-")


def env_var(name: str) -> str:
    return ENV_PREFIX + name.upper().replace(".", "_")


def split_list(raw: str) -> list[str]:
    """A comma-separated value; blanks around and between items are dropped."""
    return [item.strip() for item in raw.split(",") if item.strip()]


def parse_bool(raw: str) -> bool:
    low = raw.strip().lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off"):
        return False
    raise ValueError(raw)


# The one table of how a flag's or a variable's text becomes a field's type, keyed by the field's annotation
# (`bool | None` reads as bool). A flag of type bool is a switch with a `--no-` form instead (engine/cli.py build_parser).
PARSERS: dict[Any, Callable[[str], Any]] = {bool: parse_bool, int: int, str: str, list[str]: split_list}
WHAT = {bool: "a boolean", int: "an integer"}


@dataclass(frozen=True)
class Knob:
    """One Settings field as the outside sees it: its flag, its variable, its help, how its text is read."""

    name: str
    kind: Any  # a key of PARSERS
    help: str
    choices: tuple[str, ...] | None

    @property
    def flag(self) -> str:
        return cli_flag(self.name)

    @property
    def env(self) -> str:
        return env_var(self.name)

    @property
    def parse(self) -> Callable[[str], Any]:
        return PARSERS[self.kind]

    def from_env(self, raw: str) -> Any:
        """The variable's text as the field's value, checked as argparse checks the flag's; errors name the variable."""
        try:
            value = self.parse(raw)
        except ValueError:
            raise ValueError(f"{self.env} must be {WHAT[self.kind]}, got {raw!r}") from None
        if self.choices and value not in self.choices:
            raise ValueError(f"{self.env} must be one of {', '.join(self.choices)}, got {raw!r}")
        return value


def _kind(name: str, hint: Any) -> Any:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        hint = args[0] if len(args) == 1 else hint
    if hint not in PARSERS:
        raise TypeError(f"Settings.{name}: no parser for {hint} (engine/config.py PARSERS)")
    return hint


def _knobs() -> tuple[Knob, ...]:
    hints = typing.get_type_hints(Settings)
    return tuple(
        Knob(f.name, _kind(f.name, hints[f.name]), f.metadata["help"], f.metadata["choices"])
        for f in dataclasses.fields(Settings)
    )


KNOBS = _knobs()


def from_env(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The PLAYGROUND_* variables that are set, as field values."""
    environ = os.environ if environ is None else environ
    return {k.name: k.from_env(environ[k.env]) for k in KNOBS if k.env in environ}


def validate(settings: Settings) -> None:
    """Reject settings that cannot work, with a message naming the flag."""
    for spec in settings.lora_adapters:  # the files themselves: engine/core/lora.py preflight, before the bind
        name, sep, path = spec.partition("=")
        if not sep or not name.strip() or not path.strip():
            raise ValueError(f"{cli_flag('lora_adapters')} / {env_var('lora_adapters')}: {spec!r} is not id=DIR")
    if not 0 <= settings.speculative_ngram <= 16:
        raise ValueError(f"{cli_flag('speculative_ngram')} must be in [0, 16]")
    if not 1 <= settings.max_request_length_mb <= 100:
        raise ValueError(f"{cli_flag('max_request_length_mb')} must be in [1, 100]")
    for name in ("max_new_tokens", "max_n", "max_queue", "max_num_seqs", "kv_cache_tokens"):
        if getattr(settings, name) < 1:
            raise ValueError(f"{cli_flag(name)} must be >= 1")
    for name in (
        "max_concurrent_per_client",
        "request_timeout_s",
        "shutdown_timeout_s",
        "read_timeout_s",
        "step_log",
        "models_memory_mb",
    ):
        if getattr(settings, name) < 0:
            raise ValueError(f"{cli_flag(name)} must be >= 0")
    for name in ("pangu_project_id", "pangu_deployment_id"):
        value = getattr(settings, name)
        if value and not PATH_SEGMENT.fullmatch(value):
            raise ValueError(f"{cli_flag(name)} must match [A-Za-z0-9_-]{{1,128}}")
    if settings.media_allow_local and not settings.media_local_root:
        raise ValueError("--media-allow-local needs --media-local-root")
    if settings.chat_template_allow_path and not settings.chat_template_dir:
        raise ValueError("--chat-template-allow-path needs --chat-template-dir")
