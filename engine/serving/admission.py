"""Who may start a chat request now: the per-client concurrency limit, and draining for a graceful shutdown.

Every chat request holds a Flight from admission until its response has been sent (a stream: until its last
byte). Draining refuses new flights, lets the running ones finish for a while, then sheds the rest: each open
choice gets a closing chunk with `insufficient_system_resource`, so no client sees a torn stream.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from engine.protocol.errors import ServiceUnavailableError, TooManyRequestsError


class Flight:
    def __init__(self, admission: Admission, client: str) -> None:
        self._admission = admission
        self.client = client
        self.gen: Any = None  # the service Generation, once started
        self._closed = False

    def attach(self, gen: Any) -> None:
        self.gen = gen
        if self._admission.shedding:
            gen.shed()

    def shed(self) -> None:
        gen = self.gen
        if gen is not None:
            gen.shed()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._admission._release(self)


class Admission:
    def __init__(self, per_client: int) -> None:
        self.per_client = per_client  # 0 = no limit
        self.draining = False
        self.shedding = False
        self._lock = threading.Lock()  # drain() runs on another thread than the event loop
        self._flights: set[Flight] = set()
        self._by_client: dict[str, int] = {}

    @property
    def in_flight(self) -> int:
        return len(self._flights)

    def enter(self, client: str) -> Flight:
        if self.draining:
            raise ServiceUnavailableError("The server is shutting down.")
        with self._lock:
            count = self._by_client.get(client, 0)
            if self.per_client and count >= self.per_client:
                raise TooManyRequestsError(
                    f"Too many concurrent requests from this client: the limit is {self.per_client}."
                )
            flight = Flight(self, client)
            self._by_client[client] = count + 1
            self._flights.add(flight)
        return flight

    def _release(self, flight: Flight) -> None:
        with self._lock:
            self._flights.discard(flight)
            left = self._by_client.get(flight.client, 1) - 1
            if left > 0:
                self._by_client[flight.client] = left
            else:
                self._by_client.pop(flight.client, None)

    def drain(self, timeout: float, grace: float = 10.0) -> int:
        """Blocking (call from a thread): refuse new requests, give running ones `timeout` seconds, shed the
        rest and wait up to `grace` seconds for them to end. Returns how many were still open at the end."""
        self.draining = True
        deadline = time.monotonic() + timeout
        while self.in_flight and time.monotonic() < deadline:
            time.sleep(0.05)
        if self.in_flight:
            self.shedding = True
            with self._lock:
                flights = list(self._flights)
            for flight in flights:
                flight.shed()
            deadline = time.monotonic() + grace
            while self.in_flight and time.monotonic() < deadline:
                time.sleep(0.05)
        return self.in_flight
