"""``/mcp`` in the leak test: refused credentials, a search whose query is a canary, and a
schema violation carrying canaries, each through the WSGI layer that serves ``/mcp``."""

from __future__ import annotations

import io
import json
from wsgiref.util import setup_testing_defaults

from tests.service.leaks.conftest import USER

_app = None


def _not_mcp(environ, start_response):
    raise AssertionError("only /mcp is called here")


def _dispatcher():
    # Not config.wsgi: its django.setup() would configure logging anew, past the log tap.
    global _app
    if _app is None:
        from runner.mcp.wsgi import McpDispatcher

        _app = McpDispatcher(_not_mcp)
    return _app


def mcp_post(credential: str | None, message: dict, host: str = "127.0.0.1") -> tuple[int, bytes]:
    body = json.dumps(message).encode()
    environ: dict = {
        "REQUEST_METHOD": "POST",
        "PATH_INFO": "/mcp",
        "CONTENT_TYPE": "application/json",
        "CONTENT_LENGTH": str(len(body)),
        "HTTP_ACCEPT": "application/json, text/event-stream",
        "HTTP_HOST": host,
        "wsgi.input": io.BytesIO(body),
    }
    if credential is not None:
        environ["HTTP_AUTHORIZATION"] = f"Bearer {credential}"
    setup_testing_defaults(environ)
    answer: dict = {}

    def start_response(status, headers, exc_info=None):
        answer["status"] = int(status.split()[0])

    chunks = _dispatcher()(environ, start_response)
    content = b"".join(chunks)
    if hasattr(chunks, "close"):
        chunks.close()
    return answer["status"], content


def _call(name: str, arguments: dict) -> dict:
    return {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": name, "arguments": arguments},
    }


def seed_mcp(run) -> None:
    c = run.canaries
    status, body = mcp_post(None, _call("memory_search", {"query": c.new("mcp_anonymous_query")}))
    assert status == 401, body
    run.refusals.append(("mcp without a credential", body))
    forged = f"ctt_abcdefghij_{c.key_shaped('mcp_forged_token')}"
    status, body = mcp_post(forged, _call("memory_search", {"query": "x"}))
    assert status == 401, body
    run.refusals.append(("mcp forged token", body))
    status, body = mcp_post(
        run.owner.key,
        _call(
            "memory_search",
            {"user_id": USER, "query": c.new("mcp_search_query"), "mode": "lexical"},
        ),
    )
    assert status == 200 and b'"isError":false' in body.replace(b" ", b""), body[:600]
    status, body = mcp_post(
        run.owner.key,
        _call(
            "memory_add",
            {"user_id": USER, "content": "x", c.new("mcp_argument_name"): c.new("mcp_argument")},
        ),
    )
    assert status == 200 and b"validation_error" in body, body[:600]
    run.refusals.append(("mcp schema violation", body))
