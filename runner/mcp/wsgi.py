"""``/mcp`` beside Django in the same WSGI process.

The web process stays gunicorn's WSGI: the SDK's ASGI transport is bridged with ``a2wsgi``
(its own event loop thread, started on the first MCP request of each worker, so forking is
safe). Before the SDK reads anything, this layer bounds the body and authenticates with the
REST API's own code: a missing, unknown or revoked credential is a 401 envelope (and a Host
header outside ``ALLOWED_HOSTS`` a 400, as for Django's own requests).
"""

from __future__ import annotations

import io
import json
import threading

from a2wsgi import ASGIMiddleware
from django.conf import settings
from django.db import close_old_connections
from django.http.request import split_domain_port, validate_host

from ctxadmin.auth import TokenEnded
from runner.mcp.caller import ENVIRON_KEY, authenticate

PATHS = ("/mcp", "/mcp/")


def _envelope(
    start_response, status: str, code: str, message: str, headers=(), details=None
) -> list[bytes]:
    error = {"code": code, "message": message, "details": details or {}}
    body = json.dumps({"error": error}).encode()
    start_response(
        status,
        [("Content-Type", "application/json"), ("Content-Length", str(len(body))), *headers],
    )
    return [body]


class McpDispatcher:
    """WSGI: ``/mcp`` to the MCP server, everything else to ``app``."""

    def __init__(self, app) -> None:
        self.app = app
        self._bridge: ASGIMiddleware | None = None
        self._lock = threading.Lock()

    def bridge(self) -> ASGIMiddleware:
        with self._lock:
            if self._bridge is None:
                from runner.mcp.server import McpAsgi  # the SDK loads on first use

                self._bridge = ASGIMiddleware(McpAsgi())
            return self._bridge

    def __call__(self, environ, start_response):
        if environ.get("PATH_INFO") not in PATHS:
            return self.app(environ, start_response)
        limit = settings.CTXADMIN_MCP_MAX_REQUEST_BYTES
        try:
            length = int(environ.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = -1
        if length < 0 or length > limit:
            return _envelope(
                start_response,
                "413 Request Entity Too Large",
                "request_too_large",
                f"An MCP request body is at most {limit} bytes.",
            )
        # Django checks the Host header of its own requests; /mcp does the same.
        domain, _port = split_domain_port(
            environ.get("HTTP_HOST") or environ.get("SERVER_NAME", "")
        )
        if not domain or not validate_host(domain, settings.ALLOWED_HOSTS):
            return _envelope(
                start_response,
                "400 Bad Request",
                "disallowed_host",
                "The Host header names no host this service serves.",
            )
        close_old_connections()
        try:
            caller = authenticate(environ)
        except TokenEnded as ended:
            # A genuine token that stopped working says so, as the REST API does.
            return _envelope(
                start_response,
                "401 Unauthorized",
                ended.code,
                str(ended.detail),
                [("WWW-Authenticate", 'Bearer realm="ctxadmin"')],
                ended.details,
            )
        finally:
            close_old_connections()
        if caller is None:
            return _envelope(
                start_response,
                "401 Unauthorized",
                "not_authenticated",
                "Authentication credentials were not provided or are not valid.",
                [("WWW-Authenticate", 'Bearer realm="ctxadmin"')],
            )
        body = environ["wsgi.input"].read(length) if length else b""
        environ["wsgi.input"] = io.BytesIO(body)
        environ["CONTENT_LENGTH"] = str(len(body))
        environ[ENVIRON_KEY] = caller
        return self.bridge()(environ, start_response)
