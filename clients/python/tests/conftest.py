"""The whole ctxadmin stack, started once per test run exactly as ``make run`` starts it,
and fresh apps with keys on it.

``ctxadmin_stack`` runs ``manage.py run`` of the server repository this client lives in
(with its own ``var`` folder, a free port and a Celery queue of its own); ``make_app``
creates an app and an API key through the management commands, which reach the stack's
database through its ``var`` folder. Both are session-scoped, so the client's tests and
its plug-ins' tests share one stack.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import json
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from ctxadmin_client import AsyncClient, Client

from ctxadmin import stack
from ctxadmin.testing.service import ServiceProcess

ALL_SCOPES = ("sessions", "memory", "cache", "diagnostics", "admin")


@dataclass(frozen=True)
class StackApp:
    name: str
    key: str
    scopes: tuple[str, ...]
    base_url: str


@pytest.fixture(scope="session")
def ctxadmin_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    root = tmp_path_factory.mktemp("ctxadmin-stack")
    service = ServiceProcess(
        root / "var",
        stack.free_port(),
        root / "run.log",
        extra_env={"CTXADMIN_CELERY_QUEUE": f"ctxadmin-client-{uuid.uuid4().hex[:12]}"},
    )
    try:
        service.wait_up()
        yield service
    finally:
        if service.process.poll() is None:
            _code, alive = service.stop()
            for process in alive:
                process.kill()


@pytest.fixture(scope="session")
def make_app(ctxadmin_stack: ServiceProcess) -> Callable[..., StackApp]:
    """``make_app(name=None, scopes=None)``: a new app (a fresh name unless given) with a key
    of ``scopes`` (all of them unless given)."""
    counter = itertools.count()

    def make(
        name: str | None = None, scopes: tuple[str, ...] | list[str] | None = None
    ) -> StackApp:
        name = name or f"client-{uuid.uuid4().hex[:8]}-{next(counter)}"
        chosen = tuple(scopes or ALL_SCOPES)
        ctxadmin_stack.manage("create_app", name)
        key = ctxadmin_stack.manage("create_api_key", "--app", name, "--scopes", *chosen).strip()
        assert key.startswith("ctx_"), "create_api_key printed no key"
        return StackApp(name=name, key=key, scopes=chosen, base_url=ctxadmin_stack.base_url)

    return make


@pytest.fixture(scope="session")
def make_key(ctxadmin_stack: ServiceProcess) -> Callable[..., str]:
    """``make_key(app_name, scopes)``: another key of an existing app."""

    def make(app_name: str, scopes: tuple[str, ...] | list[str]) -> str:
        return ctxadmin_stack.manage(
            "create_api_key", "--app", app_name, "--scopes", *scopes
        ).strip()

    return make


# ---------------------------------------------------------------- both clients, one test


class Blocking:
    """An :class:`AsyncClient` driven from a blocking test: each coroutine runs to its end
    on the client's own event loop, each async iterator is drained into an iterator. The
    round-trip tests run once with :class:`Client` and once with this, so both clients
    answer every call."""

    def __init__(self, client: AsyncClient) -> None:
        self._client = client
        self._loop = asyncio.new_event_loop()

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._client, name)
        if not callable(attribute):
            return attribute

        def call(*args: Any, **kwargs: Any) -> Any:
            result = attribute(*args, **kwargs)
            if inspect.isasyncgen(result):
                return iter(self._loop.run_until_complete(_drain(result)))
            assert inspect.iscoroutine(result), f"{name} is not a coroutine function"
            return self._loop.run_until_complete(result)

        return call

    def close(self) -> None:
        self._loop.run_until_complete(self._client.aclose())
        self._loop.close()


async def _drain(items: AsyncIterator[Any]) -> list[Any]:
    return [item async for item in items]


@pytest.fixture(scope="module")
def app(make_app: Callable[..., StackApp]) -> StackApp:
    """One app with every scope for a test module (tests keep apart by user id)."""
    return make_app()


@pytest.fixture(params=["sync", "async"])
def client(request: pytest.FixtureRequest, app: StackApp) -> Iterator[Any]:
    """A :class:`Client`, then (second run) an :class:`AsyncClient`, on ``app``'s key."""
    if request.param == "sync":
        with Client(app.base_url, app.key) as sync_client:
            yield sync_client
    else:
        blocking = Blocking(AsyncClient(app.base_url, app.key))
        try:
            yield blocking
        finally:
            blocking.close()


@pytest.fixture
def user() -> str:
    return f"user-{uuid.uuid4().hex[:10]}"


# ---------------------------------------------------------------- a scripted HTTP server


class Scripted(ThreadingHTTPServer):
    """Answers each request with the next scripted (status, headers, body); ``"sleep"`` in
    the script holds the answer back for three seconds. Records what it received."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.script: list = []
        self.default: tuple = (200, {}, {"results": [], "next": None, "previous": None})
        self.received: list[dict] = []
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class Handler(BaseHTTPRequestHandler):
    server: Scripted

    def log_message(self, format: str, *args: object) -> None:
        pass

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        with self.server.lock:
            self.server.received.append(
                {
                    "method": self.command,
                    "path": self.path,
                    "headers": dict(self.headers),
                    "body": body,
                }
            )
            step = self.server.script.pop(0) if self.server.script else self.server.default
        if step == "sleep":
            time.sleep(3)
            step = self.server.default
        status, headers, payload = step
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _answer


@pytest.fixture
def scripted_server() -> Iterator[Scripted]:
    scripted = Scripted()
    thread = threading.Thread(target=scripted.serve_forever, daemon=True)
    thread.start()
    yield scripted
    scripted.shutdown()
    scripted.server_close()


# ---------------------------------------------------------------- a Responses API server


class ResponsesServer(ThreadingHTTPServer):
    """Answers ``POST /v1/responses`` as OpenAI does, with a message naming the turn, and
    records each request's input: the model of the documented snippets whose agent calls
    OpenAI (``OPENAI_BASE_URL`` set to ``url``)."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), ResponsesHandler)
        self.inputs: list = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


class ResponsesHandler(BaseHTTPRequestHandler):
    server: ResponsesServer

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.inputs.append(request["input"])
        turn = len(self.server.inputs)
        answer = {
            "id": f"resp_{turn}",
            "object": "response",
            "created_at": int(time.time()),
            "model": request["model"],
            "status": "completed",
            "output": [
                {
                    "type": "message",
                    "id": f"msg_{turn}",
                    "role": "assistant",
                    "status": "completed",
                    "content": [
                        {"type": "output_text", "text": f"Answer {turn}.", "annotations": []}
                    ],
                }
            ],
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "usage": {
                "input_tokens": 1,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": 1,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": 2,
            },
        }
        data = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def responses_server() -> Iterator[ResponsesServer]:
    server = ResponsesServer()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
