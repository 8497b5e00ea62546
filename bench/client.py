"""The benchmarks' HTTP client: one kept-alive HTTP/1.1 connection to the service's API."""

from __future__ import annotations

import http.client
import json
from urllib.parse import urlencode, urlsplit


class Api:
    """A lean HTTP/1.1 client with one kept-alive connection (stdlib ``http.client``), so
    the figures are the service's, not a heavy client library's."""

    def __init__(self, base_url: str, key: str, app: str):
        parts = urlsplit(base_url)
        self.host, self.port = parts.hostname, parts.port
        self.headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
        self.key, self.app = key, app
        self.connection = http.client.HTTPConnection(self.host, self.port, timeout=60)

    def request(self, method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
        payload = None if body is None else json.dumps(body).encode()
        try:
            self.connection.request(method, path, body=payload, headers=self.headers)
            response = self.connection.getresponse()
        except (http.client.HTTPException, ConnectionError):
            # The server closed the kept-alive connection (e.g. max_requests): reconnect once.
            self.connection.close()
            self.connection.request(method, path, body=payload, headers=self.headers)
            response = self.connection.getresponse()
        data = response.read()
        return response.status, (json.loads(data) if data else {})

    def get(self, path: str, **params) -> dict:
        query = f"?{urlencode(params)}" if params else ""
        status, body = self.request("GET", path + query)
        if status != 200:
            raise RuntimeError(f"GET {path} failed: {status} {str(body)[:300]}")
        return body

    def post(self, path: str, body: dict) -> dict:
        status, answer = self.request("POST", path, body)
        if status not in (200, 201):
            raise RuntimeError(f"POST {path} failed: {status} {str(answer)[:300]}")
        return answer

    def sessions(self, user: str) -> str:
        return f"/api/v1/apps/{self.app}/users/{user}/sessions"

    def create_session(self, user: str, session_id: str) -> None:
        self.post(self.sessions(user), {"session_id": session_id})

    def append(self, user: str, sid: str, events: list[dict]) -> None:
        body = {"event": events[0]} if len(events) == 1 else {"events": events}
        self.post(f"{self.sessions(user)}/{sid}/events", body)
