"""Remote http(s) media, only from allow-listed hosts with public addresses (spec §3.5, security-critical).

The host name is resolved once, every address it resolves to must be public, and the connection goes to the
checked address: the network backend below ignores the host name httpcore asks for and dials the pinned IP, so
a second DNS answer (rebinding) never matters, while the Host header, TLS SNI and certificate check still use
the real name. No redirects are followed, no proxy environment is read, and the body is streamed with a cap.
Everything is async: a slow server holds only its own request.

Which resolved addresses may be dialled is `fetch_remote`'s `address_check`, `is_public` unless the caller passes
another: the app never does (no setting or flag reaches it); a caller that owns a server on loopback, such as the
test suite, passes a check that also admits it, and every other rule above still applies.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpcore

from engine.media.errors import MediaError

log = logging.getLogger(__name__)

FAILED = "failed to fetch media"
_CGNAT = ipaddress.ip_network("100.64.0.0/10")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_METADATA = {ipaddress.ip_address("169.254.169.254"), ipaddress.ip_address("fd00:ec2::254")}


@dataclass(frozen=True)
class Timeouts:
    """Seconds. MindIE-faithful defaults: connect 5, read (between bytes) 30, whole download 60."""

    connect: float = 5.0
    read: float = 30.0
    total: float = 60.0


def is_public(address: str) -> bool:
    """True only for a globally routable unicast address. IPv6 forms that embed an IPv4 address (mapped,
    6to4, NAT64) are judged by the IPv4 address they carry."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address):
        embedded = ip.ipv4_mapped or ip.sixtofour
        if embedded is None and ip in _NAT64:
            embedded = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
        if embedded is not None and not is_public(str(embedded)):
            return False
    bad = ip.is_private or ip.is_loopback or ip.is_link_local or ip.is_multicast or ip.is_reserved
    return ip.is_global and not bad and not ip.is_unspecified and ip not in _CGNAT and ip not in _METADATA


class _PinnedBackend(httpcore.AsyncNetworkBackend):
    """Dials the address that passed the check, whatever host name the connection pool asks for."""

    def __init__(self, address: str) -> None:
        self._address = address
        self._inner = httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Any = None,
    ) -> httpcore.AsyncNetworkStream:
        return await self._inner.connect_tcp(self._address, port, timeout, local_address, socket_options)

    async def connect_unix_socket(self, *args: Any, **kwargs: Any) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("unix sockets are not used for media")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


async def fetch_remote(
    url: str,
    max_bytes: int,
    *,
    allowed_domains: list[str] | tuple[str, ...],
    timeouts: Timeouts = Timeouts(),
    address_check: Callable[[str], bool] = is_public,
) -> bytes:
    """GET `url` and return its body (at most `max_bytes`). Any failure -> MediaError("failed to fetch media"),
    which never echoes the response. Every address the host resolves to must pass `address_check`."""
    try:
        return await asyncio.wait_for(_fetch(url, max_bytes, allowed_domains, timeouts, address_check), timeouts.total)
    except MediaError:
        raise
    except (
        asyncio.TimeoutError,
        OSError,
        ssl.SSLError,
        ValueError,
        httpcore.TimeoutException,
        httpcore.NetworkError,
        httpcore.ProtocolError,
        httpcore.UnsupportedProtocol,
    ) as exc:
        log.info("remote media fetch failed: %s", type(exc).__name__)
        raise MediaError(FAILED) from None


async def _fetch(url: str, cap: int, allowed: Any, timeouts: Timeouts, address_check: Callable[[str], bool]) -> bytes:
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.scheme.lower() not in ("http", "https") or parts.username is not None or not host.isascii():
        raise MediaError(FAILED)
    if host not in {d.strip().lower() for d in allowed}:
        raise MediaError(FAILED)
    port = parts.port or (443 if parts.scheme.lower() == "https" else 80)
    address = await _resolve_checked(host, port, address_check)
    pool = httpcore.AsyncConnectionPool(
        ssl_context=ssl.create_default_context(), network_backend=_PinnedBackend(address), retries=0
    )
    timeout = {"connect": timeouts.connect, "read": timeouts.read, "write": timeouts.read, "pool": timeouts.connect}
    headers = [("Accept-Encoding", "identity"), ("User-Agent", "llm-playground-media/1")]
    async with pool, pool.stream("GET", url, headers=headers, extensions={"timeout": timeout}) as response:
        if response.status != 200:  # redirects included: they are never followed
            raise MediaError(FAILED)
        length = dict((k.lower(), v) for k, v in response.headers).get(b"content-length", b"0")
        if not length.isdigit() or int(length) > cap:
            raise MediaError(FAILED)
        body = bytearray()
        async for chunk in response.aiter_stream():
            body += chunk
            if len(body) > cap:
                raise MediaError(FAILED)
    return bytes(body)


async def _resolve_checked(host: str, port: int, address_check: Callable[[str], bool]) -> str:
    """Resolve once; refuse unless every address passes the check (public ones only, by default). Returns the
    address to pin."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    addresses = [str(info[4][0]) for info in infos if info[0] in (socket.AF_INET, socket.AF_INET6)]
    if not addresses or not all(address_check(a) for a in addresses):
        raise MediaError(FAILED)
    return addresses[0]
