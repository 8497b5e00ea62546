"""``/mcp`` beside Django in the same WSGI process.

The web process stays gunicorn's WSGI. Before the SDK reads anything, this layer bounds the
body and authenticates with the REST API's own code: a missing, unknown or revoked credential
is a 401 envelope (and a Host header outside ``ALLOWED_HOSTS`` a 400, as for Django's own
requests). The SDK's ASGI transport then answers on an event loop of the WSGI thread's own
(``ThreadLoopBridge``): in stateless JSON mode a request is one body in and one body out, so
the loop runs exactly while its request is served, with no hand-over between threads (a
bridge with a shared loop thread cost about 1.3 ms a request in hand-overs).
"""

from __future__ import annotations

import asyncio
import io
import json
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from http import HTTPStatus

from django.conf import settings
from django.db import close_old_connections
from django.http.request import split_domain_port, validate_host

from ctxadmin.api.jsonsafe import JsonInputError, loads_strict
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


def _too_large(start_response, limit: int) -> list[bytes]:
    return _envelope(
        start_response,
        "413 Request Entity Too Large",
        "request_too_large",
        f"An MCP request body is at most {limit} bytes.",
    )


def _chunked(environ) -> bool:
    return "chunked" in environ.get("HTTP_TRANSFER_ENCODING", "").lower()


def asgi_scope(environ: dict) -> dict:
    """The ASGI HTTP scope of a WSGI request (the environ travels along for the handlers)."""
    headers = [
        (key[5:].lower().replace("_", "-").encode("latin-1"), value.encode("latin-1"))
        for key, value in environ.items()
        if key.startswith("HTTP_") and key not in ("HTTP_CONTENT_TYPE", "HTTP_CONTENT_LENGTH")
    ]
    for key, name in (("CONTENT_TYPE", b"content-type"), ("CONTENT_LENGTH", b"content-length")):
        if environ.get(key):
            headers.append((name, environ[key].encode("latin-1")))
    root = environ.get("SCRIPT_NAME", "").encode("latin-1").decode("utf-8")
    scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": environ.get("SERVER_PROTOCOL", "HTTP/1.1").partition("/")[2] or "1.1",
        "method": environ["REQUEST_METHOD"],
        "scheme": environ.get("wsgi.url_scheme", "http"),
        "path": root + environ.get("PATH_INFO", "").encode("latin-1").decode("utf-8"),
        "raw_path": None,
        "query_string": environ.get("QUERY_STRING", "").encode("latin-1"),
        "root_path": root,
        "headers": headers,
        "server": (environ.get("SERVER_NAME", ""), int(environ.get("SERVER_PORT") or 0)),
        "wsgi_environ": environ,
    }
    if environ.get("REMOTE_ADDR"):
        scope["client"] = (environ["REMOTE_ADDR"], int(environ.get("REMOTE_PORT") or 0))
    return scope


class ThreadLoopBridge:
    """WSGI to an ASGI app that answers each request with one body: the app runs on an event
    loop owned by the calling thread (made on its first request, after any fork), with an app
    instance of that loop's own."""

    def __init__(self, make_app: Callable[[], Callable]) -> None:
        self.make_app = make_app
        self._local = threading.local()

    def __call__(self, environ, start_response):
        local = self._local
        if getattr(local, "loop", None) is None:
            local.loop = asyncio.new_event_loop()
            # One request at a time on this loop, so one thread runs its synchronous work.
            local.loop.set_default_executor(
                ThreadPoolExecutor(max_workers=1, thread_name_prefix="mcp-sync")
            )
            local.app = self.make_app()
        body = environ["wsgi.input"].read()
        received = False
        answer: dict = {"status": 500, "headers": [], "body": []}

        async def receive() -> dict:
            nonlocal received
            if not received:
                received = True
                return {"type": "http.request", "body": body, "more_body": False}
            return {"type": "http.disconnect"}  # the request is over once answered

        async def send(message: dict) -> None:
            if message["type"] == "http.response.start":
                answer["status"] = message["status"]
                answer["headers"] = message.get("headers", [])
            elif message["type"] == "http.response.body":
                answer["body"].append(message.get("body", b""))

        loop = local.loop
        loop.run_until_complete(local.app(asgi_scope(environ), receive, send))
        # Let what the request left (its server task closing) finish before the loop stops.
        loop.run_until_complete(asyncio.sleep(0))
        content = b"".join(answer["body"])
        status = answer["status"]
        try:
            reason = HTTPStatus(status).phrase
        except ValueError:  # a status Python does not name
            reason = ""
        headers = [
            (name.decode("latin-1"), value.decode("latin-1"))
            for name, value in answer["headers"]
            if name.lower() != b"content-length"
        ]
        start_response(
            f"{status} {reason}".strip(), [*headers, ("Content-Length", str(len(content)))]
        )
        return [content]


class McpDispatcher:
    """WSGI: ``/mcp`` to the MCP server, everything else to ``app``."""

    def __init__(self, app) -> None:
        self.app = app
        self._bridge: ThreadLoopBridge | None = None
        self._lock = threading.Lock()

    def bridge(self) -> ThreadLoopBridge:
        with self._lock:
            if self._bridge is None:
                from runner.mcp.server import McpAsgi  # the SDK loads on first use

                self._bridge = ThreadLoopBridge(McpAsgi)
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
            return _too_large(start_response, limit)
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
        if environ.get("REQUEST_METHOD") == "GET":
            # Stateless: no stream of server-initiated messages to open (as the protocol
            # allows, 405); a GET would otherwise hold a web thread for as long as it lasts.
            return _envelope(
                start_response,
                "405 Method Not Allowed",
                "method_not_allowed",
                "This MCP endpoint takes POST requests only (stateless: no event stream).",
                [("Allow", "POST, DELETE")],
            )
        if _chunked(environ):
            # No length given: read at most one byte past the limit (the server dechunks).
            body = environ["wsgi.input"].read(limit + 1)
            if len(body) > limit:
                return _too_large(start_response, limit)
        else:
            body = environ["wsgi.input"].read(length) if length else b""
        if body:
            # The REST API's strict JSON rules, before the SDK reads a byte: no duplicate keys,
            # NaN/Infinity, integers past 64 bits, NUL or unpaired surrogates, nesting past
            # the limit.
            try:
                loads_strict(body, settings.CTXADMIN_MAX_JSON_DEPTH)
            except JsonInputError as exc:
                return _envelope(start_response, "400 Bad Request", exc.code, exc.message)
        environ["wsgi.input"] = io.BytesIO(body)
        environ["CONTENT_LENGTH"] = str(len(body))
        environ[ENVIRON_KEY] = caller
        return self.bridge()(environ, start_response)
