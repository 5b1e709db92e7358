"""A newcomer's first start, timed: a fresh clone and an empty HOME run the README's "Run it" command, then restarts.

Clones this repository's HEAD into a temporary folder, points HOME at a new empty directory (pip's cache and the
model cache start empty; the machine's pip configuration is kept), and runs the README's command exactly
(`python3 -m venv .venv && .venv/bin/pip install --no-compile -r requirements.txt && .venv/bin/python app.py`) on a free port.
Reports the seconds to `/health` 200 and to the first streamed token of a chat, with the same stages as below
(there `imports+pool` holds the venv and `pip install`, `weights` the model's download and conversion); then
stops the server and restarts `app.py` (warm: the venv, the model cache and the kept kernel choices are there),
with `--quantization auto` (the default: the GGUF's own Q4_1 blocks) and `none`, each `--repeat` times, and
reports their seconds to `/health` 200 with a breakdown read from the server's log:

    imports+pool   from the process's start to the load's first line (Python, torch, the engine, the registry)
    weights        reading the tokenizer and the bf16 checkpoint (transformers' import included)
    quant          the GGUF's blocks, their check against the checkpoint and the kernel choices (auto only)
    runner+probes  the rest of the runner and the engine (the roofline's bandwidth probe)
    health         from the load's end to the first /health 200
    page           (beside the total) from the process's start to `/` 200: the page is imported, built and mounted
                   once the model has loaded (app.py's API-first start), `/` says "starting" until then

A timing is only meaningful beside a reference taken in the same run on the same (shared) machine: each restart
is followed by `python -c "import torch"`'s seconds, and each restart's CPU seconds (user + system, all threads, at
/health 200) are reported beside its wall seconds: they grow far less with other processes' load.

    .venv/bin/python bench/first_start.py [--keep] [--repeat 2]
    .venv/bin/python bench/first_start.py --warm-only [--repeat 2]   # restarts of this checkout, its venv and cache
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]


def readme_command() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text[text.index("## Run it") :]
    return re.search(r"```bash\n(.+?)\n```", section, re.S).group(1).strip()  # type: ignore[union-attr]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_healthy(base: str, proc: subprocess.Popen, deadline_s: float) -> float:
    started = time.perf_counter()
    while time.perf_counter() - started < deadline_s:
        if proc.poll() is not None:
            raise SystemExit(f"the server exited with {proc.returncode}")
        try:
            if httpx.get(base + "/health", timeout=2).status_code == 200:
                return time.perf_counter()
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise SystemExit("no /health 200 in time")


def wait_page(base: str, proc: subprocess.Popen, deadline_s: float) -> float:
    """When `/` first answers 200 (the page mounted; the "starting" page before is a 503)."""
    started = time.perf_counter()
    while time.perf_counter() - started < deadline_s:
        if proc.poll() is not None:
            raise SystemExit(f"the server exited with {proc.returncode}")
        try:
            if httpx.get(base + "/", timeout=5).status_code == 200:
                return time.perf_counter()
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise SystemExit("no page in time")


def first_token(base: str) -> float:
    body = {
        "model": "SmolLM2-135M-Instruct",
        "messages": [{"role": "user", "content": "Hi!"}],
        "stream": True,
        "max_tokens": 8,
    }
    with httpx.stream("POST", base + "/v1/chat/completions", json=body, timeout=120) as r:
        for line in r.iter_lines():
            if line.startswith("data: {") and any(c["delta"].get("content") for c in json.loads(line[6:])["choices"]):
                return time.perf_counter()
    raise SystemExit("no token streamed")


# The server's log lines that end each stage of a start (app.py, the pool, the runner, the roofline).
MILESTONES = (
    ("imports+pool", "INFO playground: device "),
    ("weights", "INFO engine.device: device ops on "),
    ("quant", "INFO engine.core.model_runner: weights: "),
    ("runner+probes", " loaded in "),
)
STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")


def breakdown(log_text: str, started: float, healthy: float) -> dict[str, float]:
    """Seconds per stage from the log's timestamps (wall clock) and the start / health times (`time.time()`)."""
    out: dict[str, float] = {}
    last = started
    for name, marker in MILESTONES:
        line = next((x for x in log_text.splitlines() if marker in x and STAMP.match(x)), None)
        if line is None:
            continue
        at = datetime.datetime.strptime(STAMP.match(line).group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()  # type: ignore[union-attr]
        out[name] = at - last
        last = at
    out["health"] = healthy - last
    return out


def import_torch_s(python: str) -> float:
    started = time.perf_counter()
    subprocess.run([python, "-c", "import torch"], check=True)
    return time.perf_counter() - started


def warm_restart(
    python: str, cwd: Path, env: dict[str, str], port: int, quantization: str, log: Path
) -> dict[str, float]:
    """One restart of `app.py --quantization ...`: its seconds to /health 200, its breakdown and the reference."""
    with open(log, "wb") as out:
        wall, started = time.time(), time.perf_counter()
        proc = subprocess.Popen(
            [python, "app.py", "--port", str(port), "--quantization", quantization],
            cwd=cwd,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        healthy = wait_healthy(f"http://127.0.0.1:{port}", proc, 600)
        cpu = cpu_seconds(proc.pid)
        page = wait_page(f"http://127.0.0.1:{port}", proc, 600)
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(60)
    total = healthy - started
    parts = breakdown(log.read_text(encoding="utf-8", errors="replace"), wall, wall + total)
    return {"total": total, **parts, "page": page - started, "cpu": cpu, "import torch": import_torch_s(python)}


def cpu_seconds(pid: int) -> float:
    """The process's CPU seconds so far (user + system, all its threads): on a machine others load, a start's wall
    seconds grow with their load; its CPU seconds much less."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def report_restarts(
    python: str, cwd: Path, env: dict[str, str], port: int, repeat: int, logs: Path, modes: list[str]
) -> None:
    for quantization in modes:
        for i in range(repeat):
            r = warm_restart(python, cwd, env, port, quantization, logs / f"warm-{quantization}-{i}.log")
            stages = ", ".join(
                f"{k} {v:.1f}" for k, v in r.items() if k not in ("total", "page", "cpu", "import torch")
            )
            print(
                f"warm restart --quantization {quantization}: /health 200 at {r['total']:.1f} s ({stages}), "
                f"{r['cpu']:.1f} CPU s; page at {r['page']:.1f} s; reference: import torch {r['import torch']:.1f} s",
                flush=True,
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keep", action="store_true", help="keep the clone and the HOME for a look")
    parser.add_argument("--repeat", type=int, default=2, help="warm restarts per --quantization")
    parser.add_argument("--modes", default="auto,none", help="the --quantization values restarted, comma-separated")
    parser.add_argument(
        "--warm-only", action="store_true", help="restarts of this checkout with this venv and model cache only"
    )
    args = parser.parse_args()
    if args.warm_only:
        logs = Path(tempfile.mkdtemp(prefix="warm-start-"))
        env = {k: v for k, v in os.environ.items() if not k.startswith("PLAYGROUND_")}
        report_restarts(sys.executable, ROOT, env, free_port(), args.repeat, logs, args.modes.split(","))
        print(f"logs: {logs}")
        return
    work = Path(tempfile.mkdtemp(prefix="first-start-"))
    clone, home = work / "clone", work / "home"
    home.mkdir()
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    port = free_port()
    command = readme_command().replace("app.py", f"app.py --port {port}")
    # A newcomer's shell: none of this machine's playground, XDG or venv variables, and Python writing the bytecode
    # of what it imports (PYTHONDONTWRITEBYTECODE, which a sandbox may set, left out).
    drop = ("PLAYGROUND_", "XDG_", "VIRTUAL_ENV", "PYTHONDONTWRITEBYTECODE")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    pip_conf = Path.home() / ".config" / "pip" / "pip.conf"
    if pip_conf.is_file() and "PIP_CONFIG_FILE" not in env:
        env["PIP_CONFIG_FILE"] = str(pip_conf)
    env["HOME"] = str(home)
    base = f"http://127.0.0.1:{port}"
    print(f"+ HOME={home} (empty)\n+ {command}")
    wall, started = time.time(), time.perf_counter()
    with open(work / "first.log", "wb") as log:  # the child keeps its own copy of the descriptor
        proc = subprocess.Popen(
            ["bash", "-c", command], cwd=clone, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        healthy = wait_healthy(base, proc, 900)
        token = first_token(base)
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(60)
    print(f"first start: /health 200 at {healthy - started:.0f} s, first streamed token at {token - started:.0f} s")
    parts = breakdown((work / "first.log").read_text(errors="replace"), wall, wall + healthy - started)
    print("  stages: " + ", ".join(f"{k} {v:.0f}" for k, v in parts.items()))
    print("  (pip install of requirements.txt, the model's download and its conversion included)")
    report_restarts(str(clone / ".venv" / "bin" / "python"), clone, env, port, args.repeat, work, args.modes.split(","))
    if args.keep:
        print(f"kept: {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
