"""Remote media: allow-list, public addresses only, pinning, no redirects, timeouts, size caps (spec §3.5,
cases 79-83). [SEC]

Refusals use the real address check (`is_public`, the default). Only tests that need a server on loopback pass
`address_check=public_or_loopback`, which admits loopback and nothing else besides public addresses.
No test connects anywhere but loopback: private and metadata addresses are refused before any connection.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from engine.config import Settings
from engine.media import MediaError, Timeouts, load_media
from engine.media import loader as media_loader
from engine.media.remote import FAILED, fetch_remote, is_public
from tests.conftest import public_or_loopback
from tests.media_samples import image_bytes

PNG = image_bytes("PNG")
MiB = 1 << 20


class Handler(BaseHTTPRequestHandler):
    hits: list[tuple[str, str]]

    def log_message(self, *args: Any) -> None:
        pass

    def _send(self, status: int, body: bytes = b"", length: bool = True, **headers: str) -> None:
        self.send_response(status)
        if length:
            self.send_header("Content-Length", str(len(body)))
        for key, value in headers.items():
            self.send_header(key.replace("_", "-"), value)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self.server.hits.append((self.path, self.headers.get("Host", "")))  # type: ignore[attr-defined]
        path = self.path
        if path == "/ok.png":
            self._send(200, PNG)
        elif path == "/no-length.png":
            self._send(200, PNG, length=False)
        elif path == "/redirect":
            self._send(302, Location=self.server.redirect_to)  # type: ignore[attr-defined]
        elif path == "/secret-404":
            self._send(404, b"SECRET-BODY")
        elif path == "/huge-length":
            self._send(200, length=False, Content_Length=str(21 * MiB))
        elif path == "/slow.png":
            self._send(200, length=False, Content_Length=str(len(PNG)))
            for i in range(0, len(PNG), 20):
                time.sleep(0.1)
                self.wfile.write(PNG[i : i + 20])
        elif path == "/trickle":
            self._send(200, PNG[:8], length=False)
            self._pour(b"x", 0.2, 50)
        elif path == "/stall":
            self._send(200, PNG[:8], length=False)
            time.sleep(3)
        elif path == "/endless":
            self._send(200, PNG[:8], length=False)
            self._pour(b"\0" * 65536, 0, 30 * MiB // 65536)

    def _pour(self, chunk: bytes, pause: float, count: int) -> None:
        try:
            for _ in range(count):
                self.wfile.write(chunk)
                time.sleep(pause)
        except OSError:
            pass  # the client gave up, as it should


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client aborting a body is expected here


@pytest.fixture
def server() -> Iterator[Server]:
    srv = Server(("127.0.0.1", 0), Handler)
    srv.hits = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A loopback socket that must never see a connection."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    sock.setblocking(False)
    yield sock
    sock.close()


def assert_no_connection(sock: socket.socket) -> None:
    with pytest.raises(BlockingIOError):
        sock.accept()[0].close()


def fetch(
    url: str,
    *,
    allowed: tuple[str, ...] = ("localhost", "127.0.0.1"),
    cap: int = 20 * MiB,
    timeouts: Timeouts = Timeouts(),
    loopback: bool = False,
) -> bytes:
    check = public_or_loopback if loopback else is_public
    return asyncio.run(fetch_remote(url, cap, allowed_domains=allowed, timeouts=timeouts, address_check=check))


def refused(url: str, **kw: Any) -> str:
    with pytest.raises(MediaError) as info:
        fetch(url, **kw)
    return info.value.message


@pytest.mark.parametrize(
    ("address", "public"),
    [
        ("93.184.216.34", True),
        ("1.1.1.1", True),
        ("2606:4700:4700::1111", True),
        ("127.0.0.1", False),
        ("127.8.9.10", False),
        ("::1", False),
        ("0.0.0.0", False),
        ("::", False),
        ("10.0.0.1", False),
        ("172.16.5.4", False),
        ("192.168.1.1", False),
        ("fc00::1", False),
        ("fd12::1", False),
        ("169.254.169.254", False),
        ("169.254.1.1", False),
        ("fe80::1", False),
        ("fe80::1%1", False),
        ("fd00:ec2::254", False),
        ("100.64.0.1", False),
        ("224.0.0.1", False),
        ("239.255.255.250", False),
        ("ff02::1", False),
        ("240.0.0.1", False),
        ("255.255.255.255", False),
        ("192.0.2.1", False),
        ("198.18.0.1", False),
        ("::ffff:127.0.0.1", False),
        ("::ffff:10.0.0.1", False),
        ("::ffff:169.254.169.254", False),
        ("::ffff:93.184.216.34", False),
        ("2002:7f00:1::", False),
        ("2002:a00:1::", False),
        ("64:ff9b::a00:1", False),
        ("64:ff9b::7f00:1", False),
        ("::127.0.0.1", False),
        ("2001:db8::1", False),
        ("not-an-ip", False),
        ("", False),
    ],
)
def test_public_address_check(address: str, public: bool) -> None:
    # IPv4-mapped IPv6 is refused even for a public IPv4 (python counts ::ffff:0:0/96 as private): DNS never
    # needs to answer with one, and refusing the whole range leaves no mapped trick to find.
    assert is_public(address) is public


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:{port}/a.png",
        "http://localhost:{port}/a.png",  # a host name that resolves to loopback
        "http://[::1]:{port}/a.png",
        "http://[::ffff:127.0.0.1]:{port}/a.png",
        "http://10.0.0.1/a.png",
        "http://169.254.169.254/latest/meta-data",
        "http://[fd00:ec2::254]/latest",
        "http://0.0.0.0:{port}/a.png",
    ],
)
def test_internal_addresses_are_refused_even_when_allow_listed(url: str, listener: socket.socket) -> None:
    port = listener.getsockname()[1]
    allowed = (
        "127.0.0.1",
        "localhost",
        "::1",
        "::ffff:127.0.0.1",
        "10.0.0.1",
        "169.254.169.254",
        "fd00:ec2::254",
        "0.0.0.0",
    )
    assert refused(url.format(port=port), allowed=allowed) == FAILED
    assert_no_connection(listener)


def test_the_app_checks_public_addresses_and_tests_add_only_loopback() -> None:
    assert inspect.signature(fetch_remote).parameters["address_check"].default is is_public  # what the app uses
    assert all(public_or_loopback(a) for a in ("127.0.0.1", "127.8.9.10", "::1", "93.184.216.34"))
    internal = ("10.0.0.1", "192.168.1.1", "169.254.169.254", "fd00:ec2::254", "fe80::1%1", "0.0.0.0", "not-an-ip")
    assert not any(public_or_loopback(a) for a in internal)
    assert refused("http://10.0.0.1/a.png", allowed=("10.0.0.1",), loopback=True) == FAILED  # before connecting


def test_a_name_with_any_internal_address_is_refused(monkeypatch: pytest.MonkeyPatch, listener: socket.socket) -> None:
    real = socket.getaddrinfo
    port = listener.getsockname()[1]

    def fake(host: str, *args: Any, **kwargs: Any) -> list:
        if host == "mixed.test":  # one public and one loopback answer: one bad address is enough
            return [
                (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("93.184.216.34", port)),
                (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", port)),
            ]
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", fake)
    assert refused(f"http://mixed.test:{port}/a.png", allowed=("mixed.test",)) == FAILED
    assert_no_connection(listener)


def test_host_must_be_allow_listed_exactly(server: Server) -> None:
    port = server.server_address[1]
    for allowed in ((), ("example.com",), ("localhost.",), ("127.0.0.2",)):
        assert refused(f"http://localhost:{port}/ok.png", allowed=allowed, loopback=True) == FAILED
    assert fetch(f"http://LocalHost:{port}/ok.png", allowed=(" LOCALHOST ",), loopback=True) == PNG
    assert server.hits == [("/ok.png", f"localhost:{port}")]


@pytest.mark.parametrize(
    "url",
    [
        "ftp://localhost/a.png",
        "http://user:pw@localhost:{port}/ok.png",
        "http:///a.png",
        "http://localhost:99999/a.png",
        "http://localhost:x/a.png",
    ],
)
def test_malformed_urls_are_refused(url: str, server: Server) -> None:
    assert refused(url.format(port=server.server_address[1]), loopback=True) == FAILED
    assert server.hits == []


def test_the_connection_is_pinned_to_the_checked_address(monkeypatch: pytest.MonkeyPatch, server: Server) -> None:
    real = socket.getaddrinfo
    lookups: list[str] = []
    port = server.server_address[1]

    def fake(host: str, *args: Any, **kwargs: Any) -> list:
        if host == "media.test":  # resolves once to loopback, then "rebinds" to a private address
            lookups.append(host)
            address = "127.0.0.1" if len(lookups) == 1 else "10.0.0.1"
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port))]
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", fake)
    assert fetch(f"http://media.test:{port}/ok.png", allowed=("media.test",), loopback=True) == PNG
    assert lookups == ["media.test"]  # exactly one lookup: the connection went to the checked address
    assert server.hits == [("/ok.png", f"media.test:{port}")]  # and the Host header keeps the name


def test_redirects_are_not_followed(server: Server) -> None:
    target = Server(("127.0.0.1", 0), Handler)
    target.hits = []  # type: ignore[attr-defined]
    threading.Thread(target=target.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        server.redirect_to = f"http://127.0.0.1:{target.server_address[1]}/ok.png"  # type: ignore[attr-defined]
        assert refused(f"http://localhost:{server.server_address[1]}/redirect", loopback=True) == FAILED
        assert target.hits == []  # type: ignore[attr-defined]
    finally:
        target.shutdown()
        target.server_close()


def test_statuses_other_than_200_are_refused_without_echoing_the_body(server: Server) -> None:
    message = refused(f"http://localhost:{server.server_address[1]}/secret-404", loopback=True)
    assert message == FAILED and "SECRET" not in message


def test_body_without_length_and_size_caps(server: Server) -> None:
    port = server.server_address[1]
    assert fetch(f"http://localhost:{port}/no-length.png", loopback=True) == PNG
    assert refused(f"http://localhost:{port}/ok.png", cap=len(PNG) - 1, loopback=True) == FAILED
    start = time.monotonic()
    assert refused(f"http://localhost:{port}/huge-length", loopback=True) == FAILED  # refused on the header alone
    assert refused(f"http://localhost:{port}/endless", loopback=True) == FAILED  # aborted once 20 MiB is passed
    assert time.monotonic() - start < 20


def test_timeouts(server: Server) -> None:
    assert Timeouts() == Timeouts(connect=5.0, read=30.0, total=60.0)  # the spec's values
    port = server.server_address[1]
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        closed_port = closed.getsockname()[1]  # bound, not listening: connections are refused
        start = time.monotonic()
        assert refused(f"http://localhost:{closed_port}/a.png", loopback=True) == FAILED
        assert time.monotonic() - start < 6
    start = time.monotonic()
    assert refused(f"http://localhost:{port}/stall", timeouts=Timeouts(read=0.5), loopback=True) == FAILED
    assert time.monotonic() - start < 2.5
    start = time.monotonic()  # bytes keep coming, so only the whole-download limit can stop it
    assert refused(f"http://localhost:{port}/trickle", timeouts=Timeouts(read=1.0, total=1.0), loopback=True) == FAILED
    assert time.monotonic() - start < 3


def test_https_to_a_plain_server_fails_cleanly(server: Server) -> None:
    assert refused(f"https://localhost:{server.server_address[1]}/ok.png", loopback=True) == FAILED


def test_a_slow_download_does_not_block_the_event_loop(server: Server) -> None:
    url = f"http://localhost:{server.server_address[1]}/slow.png"

    async def main() -> tuple[bytes, int]:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        task = asyncio.create_task(ticker())
        body = await fetch_remote(url, 20 * MiB, allowed_domains=["localhost"], address_check=public_or_loopback)
        task.cancel()
        return body, ticks

    start = time.monotonic()
    body, ticks = asyncio.run(main())
    elapsed = time.monotonic() - start
    assert body == PNG and elapsed > 0.3
    assert ticks >= 10  # the loop kept running other work all along (a blocking fetch would allow none)


def test_load_media_gates_and_decodes_remote_parts(
    server: Server, listener: socket.socket, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = server.server_address[1]
    part = {"type": "image_url", "image_url": {"url": f"http://localhost:{port}/ok.png"}}
    on = Settings(media_allow_remote=True, media_remote_allowed_domains=["localhost"])
    for settings in (
        Settings(),
        Settings(media_remote_allowed_domains=["localhost"]),
        on.replace(media_remote_allowed_domains=[]),
        on,
    ):
        with pytest.raises(MediaError, match=FAILED):
            asyncio.run(load_media(part, settings.serving))  # disabled, not allow-listed, or loopback: all refused
    assert server.hits == []
    monkeypatch.setattr(media_loader, "fetch_remote", functools.partial(fetch_remote, address_check=public_or_loopback))
    media = asyncio.run(load_media(part, on.serving))
    assert (media.kind, media.mime, media.origin, media.image.size) == ("image", "image/png", "remote", (32, 24))
    video = {"type": "video_url", "video_url": f"http://localhost:{port}/ok.png"}
    with pytest.raises(MediaError, match=FAILED):  # wrong content is one more failure to fetch (§3.5)
        asyncio.run(load_media(video, on.serving))
