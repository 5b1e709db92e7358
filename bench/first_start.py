"""A newcomer's first start, timed: a fresh clone and an empty HOME run the README's "Run it" command, then a restart.

Clones this repository's HEAD into a temporary folder, points HOME at a new empty directory (pip's cache and the
model cache start empty; the machine's pip configuration is kept), and runs the README's command exactly
(`python3 -m venv .venv && .venv/bin/pip install -r requirements.txt && .venv/bin/python app.py`) on a free port.
Reports the seconds to the end of `pip install`, to `/health` 200 and to the first streamed token of a chat; then
stops the server, starts `app.py` again (the warm restart) and reports its seconds to `/health` 200.

    .venv/bin/python bench/first_start.py [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keep", action="store_true", help="keep the clone and the HOME for a look")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="first-start-"))
    clone, home = work / "clone", work / "home"
    home.mkdir()
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    port = free_port()
    command = readme_command().replace("app.py", f"app.py --port {port}")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PLAYGROUND_", "XDG_", "VIRTUAL_ENV"))}
    pip_conf = Path.home() / ".config" / "pip" / "pip.conf"
    if pip_conf.is_file() and "PIP_CONFIG_FILE" not in env:
        env["PIP_CONFIG_FILE"] = str(pip_conf)
    env["HOME"] = str(home)
    base = f"http://127.0.0.1:{port}"
    print(f"+ HOME={home} (empty)\n+ {command}")
    started = time.perf_counter()
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
    print("  (pip install -r requirements.txt, the model's download and its conversion included)")
    with open(work / "warm.log", "wb") as log:
        proc = subprocess.Popen(
            [".venv/bin/python", "app.py", "--port", str(port)],
            cwd=clone,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    started = time.perf_counter()
    try:
        healthy = wait_healthy(base, proc, 300)
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(60)
    print(f"warm restart: /health 200 at {healthy - started:.1f} s")
    if args.keep:
        print(f"kept: {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
