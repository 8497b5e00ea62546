"""The load's HTTP client (one kept-alive connection per thread, nothing retried) and the
record of each call it makes."""

from __future__ import annotations

import http.client
import json
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

from bench.load.plan import CLIENT_TIMEOUT_SECONDS, EXPECTED, IDLE_SECONDS


def now() -> float:
    return time.perf_counter()


class Client:
    """One kept-alive HTTP/1.1 connection (stdlib ``http.client``). Nothing is retried: a
    connection that fails is its request's error, and the next request opens a new one."""

    def __init__(self, base_url: str, key: str):
        parts = urlsplit(base_url)
        self.host, self.port = parts.hostname, parts.port
        self.headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
        self.connection: http.client.HTTPConnection | None = None
        self.used = 0.0

    def connect(self) -> int:
        """Open the connection if it is not (or has been idle long enough that the server
        may be closing it: gunicorn keeps an idle one for 5 s); its local port."""
        if self.connection is not None and now() - self.used > IDLE_SECONDS:
            self.close()
        if self.connection is None:
            self.connection = http.client.HTTPConnection(
                self.host, self.port, timeout=CLIENT_TIMEOUT_SECONDS
            )
        if self.connection.sock is None:
            self.connection.connect()
        return self.connection.sock.getsockname()[1]

    def close(self) -> None:
        if self.connection is not None:
            self.connection.close()
            self.connection = None

    def request(self, method: str, path: str, body=None) -> tuple[int, dict, str | None]:
        payload = None if body is None else json.dumps(body).encode()
        self.connect()
        try:
            self.connection.request(method, path, body=payload, headers=self.headers)
            response = self.connection.getresponse()
            data = response.read()
        except BaseException:
            self.close()
            raise
        self.used = now()
        if response.will_close:
            self.close()
        try:
            parsed = json.loads(data) if data else {}
        except ValueError:
            parsed = {"unparsed": data[:200].decode("utf-8", "replace")}
        return response.status, parsed, response.getheader("Retry-After")

    def get(self, path: str) -> dict:
        status, body, _retry = self.request("GET", path)
        if status != 200:
            raise RuntimeError(f"GET {path}: {status} {str(body)[:300]}")
        return body

    def send(self, method: str, path: str, body, expected: set[int]) -> dict:
        status, answer, _retry = self.request(method, path, body)
        if status not in expected:
            raise RuntimeError(f"{method} {path}: {status} {str(answer)[:300]}")
        return answer


@dataclass
class Call:
    endpoint: str
    start: float
    end: float
    outcome: str  # "ok", "http 503 database_unavailable", "connection RemoteDisconnected", ...

    @property
    def ok(self) -> bool:
        return self.outcome == "ok"


def outcome_of(endpoint: str, status: int, body: dict, retry_after: str | None) -> str:
    if status in EXPECTED[endpoint]:
        return "ok"
    error = body.get("error") if isinstance(body, dict) else None
    code = error.get("code") if isinstance(error, dict) else "no envelope"
    if status == 503 and code == "database_unavailable" and not retry_after:
        code += " without Retry-After"
    return f"http {status} {code}"
