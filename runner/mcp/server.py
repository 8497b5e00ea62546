"""The MCP server for one request's caller: ``tools/list`` shows only what the caller may
call, ``tools/call`` validates against the tool's schema and runs its handler in a worker
thread (Django's ORM is synchronous), and two read-only resources show a session's context
and a user's memories. Every call is logged and counted by tool and outcome, never with its
arguments."""

from __future__ import annotations

import asyncio
import importlib.metadata
import json
import logging
import re
import time
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.db import close_old_connections
from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError, best_match
from mcp import types
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared.exceptions import McpError
from prometheus_client import Counter, Histogram

from ctxadmin import mcp_calls
from ctxadmin.canonical import canonical_json
from ctxadmin.errors import ServiceError, invalid, not_found
from ctxadmin.models import SCOPE_MEMORY, SCOPE_SESSIONS
from ctxadmin.pruning import echoed
from memory import entries
from runner.mcp import tools as mcp_tools
from runner.mcp.caller import ENVIRON_KEY, Caller
from runner.mcp.outbound import outbound

logger = logging.getLogger("ctxadmin.mcp")

MCP_CALLS = Counter(
    "ctxadmin_mcp_calls_total", "MCP tool calls, by tool and outcome.", ["tool", "outcome"]
)
MCP_LATENCY = Histogram(
    "ctxadmin_mcp_call_duration_seconds",
    "Time to answer an MCP tool call, by tool.",
    ["tool"],
    buckets=(0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
)
MEMORY_RESOURCE_LIMIT = 100
_VALIDATORS = {tool.name: Draft202012Validator(tool.input_schema) for tool in mcp_tools.TOOLS}
_CONTEXT_URI = re.compile(r"^ctxadmin://users/([^/]+)/sessions/([^/]+)/context\Z")
_MEMORY_URI = re.compile(r"^ctxadmin://users/([^/]+)/memories\Z")


def _caller() -> Caller:
    request = server.request_context.request
    return request.scope["wsgi_environ"][ENVIRON_KEY]


def schema_error(error: ValidationError) -> ServiceError:
    """The first violation as a ``validation_error`` naming the argument; the value itself
    is never echoed."""
    path = [str(part) for part in error.absolute_path]
    message = f"violates '{error.validator}' {json.dumps(error.validator_value)[:80]}"
    if error.validator == "required" and isinstance(error.instance, dict):
        missing = [name for name in error.validator_value if name not in error.instance]
        path.append(missing[0] if missing else "arguments")
        message = "is required"
    elif error.validator == "additionalProperties" and isinstance(error.instance, dict):
        known = set(error.schema.get("properties", {}))
        extra = sorted(name for name in error.instance if name not in known)
        path.append(echoed(extra[0], 64) if extra else "arguments")
        message = "is not an argument of this tool"
    elif error.validator == "type":
        message = f"must be of type {error.validator_value}"
    elif error.validator == "enum":
        message = f"must be one of {error.validator_value}"
    return invalid(".".join(path) or "arguments", message)


def _error(exc: ServiceError) -> types.CallToolResult:
    body = {"error": {"code": exc.code, "message": exc.message, "details": exc.details or {}}}
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=json.dumps(body))],
        structuredContent=body,
        isError=True,
    )


def _denied() -> ServiceError:
    return ServiceError(
        "unknown_tool", "No such tool for this credential (see tools/list).", status_code=404
    )


def _admit(caller: Caller) -> None:
    """The caller's share of the per-credential limit (counted for the console), or 429."""
    limit = settings.CTXADMIN_MCP_CALLS_PER_MINUTE
    wait = mcp_calls.admit(caller.app.pk, caller.prefix, limit)
    if wait is not None:
        raise ServiceError(
            "rate_limited",
            f"At most {limit} MCP calls a minute per credential; retry in {wait:.1f} s.",
            status_code=429,
            details={"retry_after_s": round(wait, 1)},
        )


def _served(caller: Caller, label: str, work: Callable[[], Any]) -> Any:
    """One MCP request that does work (a tool call, a resource read), synchronously in a
    worker thread: admitted by the rate limit, cleaned on the way out (``outbound``),
    logged and counted by its label and outcome, never with its arguments. Raises the
    ``ServiceError`` it ends with (an unexpected error becomes ``internal_error``)."""
    started = time.perf_counter()
    outcome = "ok"
    close_old_connections()
    try:
        _admit(caller)
        return outbound(work())
    except ServiceError as exc:
        outcome = exc.code
        raise
    except Exception:
        outcome = "internal_error"
        logger.exception("mcp call failed", extra={"tool": label, "app": caller.app.name})
        raise ServiceError(
            "internal_error", "The request could not complete.", status_code=500
        ) from None
    finally:
        close_old_connections()
        elapsed = time.perf_counter() - started
        MCP_CALLS.labels(label, outcome).inc()
        MCP_LATENCY.labels(label).observe(elapsed)
        logger.info(
            "mcp call",
            extra={
                "tool": label,
                "app": caller.app.name,
                "credential": f"{caller.kind}:{caller.prefix}",
                "outcome": outcome,
                "duration_ms": round(elapsed * 1000, 2),
            },
        )


def _tool_result(caller: Caller, tool: mcp_tools.Tool | None, arguments: dict | None) -> dict:
    if tool is None or not tool.allows(caller):
        raise _denied()
    args = arguments if arguments is not None else {}
    error = best_match(_VALIDATORS[tool.name].iter_errors(args))
    if error is not None:
        raise schema_error(error)
    # Round-tripped through JSON: dates and ids become the strings the client receives.
    return json.loads(json.dumps(tool.handler(caller, args), default=str))


def run_call(caller: Caller, name: str, arguments: dict | None) -> types.CallToolResult:
    """One tool call, synchronously (in a worker thread)."""
    tool = mcp_tools.BY_NAME.get(name)
    try:
        result = _served(
            caller, tool.name if tool else "unknown", lambda: _tool_result(caller, tool, arguments)
        )
        text = json.dumps(result)
        if len(text) > mcp_tools.MAX_RESULT_BYTES:
            raise mcp_tools.result_size_error(len(text))
    except ServiceError as exc:
        return _error(exc)
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)], structuredContent=result
    )


def _resource(caller: Caller, uri: str) -> dict:
    match = _CONTEXT_URI.match(uri)
    if match and caller.may(SCOPE_SESSIONS, "context_build"):
        args = {"user_id": match.group(1), "session_id": match.group(2), "query": "."}
        args["memory"] = False
        return mcp_tools.context_build_tool(caller, args)
    match = _MEMORY_URI.match(uri)
    if match and caller.may(SCOPE_MEMORY, "memory_search"):
        user = mcp_tools.user_of(caller, {"user_id": match.group(1)})
        rows = entries.list_memories(caller.app, user, MEMORY_RESOURCE_LIMIT)
        return {"note": mcp_tools.UNTRUSTED, "memories": json.loads(json.dumps(rows, default=str))}
    raise not_found()


def read_resource_sync(caller: Caller, uri: str) -> str:
    """One resource read, synchronously (in a worker thread), admitted, counted and logged
    like a tool call; an error is a JSON-RPC error whose data is the error envelope."""
    label = "resource:" + ("context" if "/sessions/" in uri else "memories")
    try:
        return canonical_json(_served(caller, label, lambda: _resource(caller, uri))).decode()
    except ServiceError as exc:
        envelope = {"code": exc.code, "message": exc.message, "details": exc.details or {}}
        raise McpError(
            types.ErrorData(
                code=types.INVALID_PARAMS if exc.status_code < 500 else types.INTERNAL_ERROR,
                message=exc.message,
                data={"error": envelope},
            )
        ) from None


# The version is named here: unnamed, the SDK reads the mcp package's metadata from disk
# on every stateless request.
server: Server[Any, Any] = Server(
    "ctxadmin",
    version=importlib.metadata.version("ctxadmin"),
    instructions="ctxadmin memory and context tools.",
)


async def _in_thread(function, *args):
    """``function`` on the loop's executor: Django's ORM is synchronous and refuses to run on a
    thread with a running event loop. The bridge gives each loop one long-lived thread, so its
    database connection lasts (a thread a call would open a connection a call)."""
    return await asyncio.get_running_loop().run_in_executor(None, function, *args)


# Each tool's MCP description, built once.
_DESCRIBED = {
    tool.name: types.Tool(
        name=tool.name,
        description=tool.description,
        inputSchema=tool.input_schema,
        annotations=types.ToolAnnotations(
            readOnlyHint=tool.read_only, destructiveHint=tool.name.endswith(("delete", "user"))
        ),
    )
    for tool in mcp_tools.TOOLS
}


# The two tool requests are answered by handlers of our own rather than through the SDK's
# decorators: those keep one process-wide cache of "the" tool list, which here depends on the
# caller (a call after another caller's listing would list the tools again, and a refused
# name would be logged), and they would validate arguments that ``run_call`` validates.
async def _list_tools(_request: types.ListToolsRequest) -> types.ServerResult:
    tools = [_DESCRIBED[tool.name] for tool in mcp_tools.visible(_caller())]
    return types.ServerResult(types.ListToolsResult(tools=tools))


async def _call_tool(request: types.CallToolRequest) -> types.ServerResult:
    params = request.params
    result = await _in_thread(run_call, _caller(), params.name, params.arguments)
    return types.ServerResult(result)


server.request_handlers[types.ListToolsRequest] = _list_tools
server.request_handlers[types.CallToolRequest] = _call_tool


@server.list_resources()
async def list_resources() -> list[types.Resource]:
    caller = _caller()
    found = []
    if caller.user_id is not None and caller.may(SCOPE_MEMORY, "memory_search"):
        found.append(
            types.Resource(
                uri=f"ctxadmin://users/{caller.user_id}/memories",
                name="memories",
                description="The user's long-term memories (untrusted reference data).",
                mimeType="application/json",
            )
        )
    if caller.session_id is not None and caller.may(SCOPE_SESSIONS, "context_build"):
        found.append(
            types.Resource(
                uri=f"ctxadmin://users/{caller.user_id}/sessions/{caller.session_id}/context",
                name="context",
                description="The session's current bounded context.",
                mimeType="application/json",
            )
        )
    return found


@server.list_resource_templates()
async def list_resource_templates() -> list[types.ResourceTemplate]:
    return [
        types.ResourceTemplate(
            uriTemplate="ctxadmin://users/{user_id}/sessions/{session_id}/context",
            name="context",
            description="A session's current bounded context.",
            mimeType="application/json",
        ),
        types.ResourceTemplate(
            uriTemplate="ctxadmin://users/{user_id}/memories",
            name="memories",
            description="A user's long-term memories, newest first (at most 100).",
            mimeType="application/json",
        ),
    ]


@server.read_resource()
async def read_resource(uri) -> str:
    return await _in_thread(read_resource_sync, _caller(), str(uri))


class McpAsgi:
    """The SDK's streamable HTTP transport in stateless JSON mode (any web process answers
    any call). Its task group is entered once, on the loop that serves the requests."""

    def __init__(self) -> None:
        self.manager = StreamableHTTPSessionManager(app=server, json_response=True, stateless=True)
        self._ready: asyncio.Event | None = None

    async def _run(self) -> None:
        async with self.manager.run():
            assert self._ready is not None
            self._ready.set()
            await asyncio.Event().wait()

    async def __call__(self, scope, receive, send) -> None:
        if self._ready is None:
            self._ready = asyncio.Event()
            self._task = asyncio.get_running_loop().create_task(self._run())
        await self._ready.wait()
        await self.manager.handle_request(scope, receive, send)
