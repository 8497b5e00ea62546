"""The client covers the API: every operation of the committed OpenAPI schema
(``docs/openapi.yaml``) has a client method in ``ctxadmin_client.operations.OPERATIONS``, every
method there has its operation, and each method sends the method and path its row names."""

from __future__ import annotations

import asyncio
import inspect
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from ctxadmin_client import AsyncClient, Client
from ctxadmin_client._ops_apps import AppOperations
from ctxadmin_client._ops_memory import MemoryOperations
from ctxadmin_client._ops_runs import RunOperations
from ctxadmin_client._ops_sessions import SessionOperations
from ctxadmin_client._ops_threads import ThreadOperations
from ctxadmin_client.operations import OPERATIONS

SCHEMA = Path(__file__).resolve().parents[3] / "docs" / "openapi.yaml"
HTTP_METHODS = {"get", "put", "post", "delete", "patch", "head", "options"}


def schema_operations() -> dict[str, tuple[str, str]]:
    document = yaml.safe_load(SCHEMA.read_text())
    return {
        operation["operationId"]: (method.upper(), route)
        for route, item in document["paths"].items()
        for method, operation in item.items()
        if method in HTTP_METHODS
    }


def api_methods() -> set[str]:
    found: set[str] = set()
    for mixin in (
        SessionOperations,
        RunOperations,
        MemoryOperations,
        AppOperations,
        ThreadOperations,
    ):
        found |= {name for name in vars(mixin) if not name.startswith("_")}
    return found


def test_every_operation_of_the_schema_has_a_client_method():
    published = schema_operations()
    missing = sorted(set(published) - set(OPERATIONS))
    assert not missing, f"operations without a client method (add them to OPERATIONS): {missing}"
    for operation_id, (method, route) in published.items():
        row = OPERATIONS[operation_id]
        assert (row.method, row.path) == (method, route), operation_id


def test_every_client_operation_is_in_the_schema():
    published = schema_operations()
    gone = sorted(set(OPERATIONS) - set(published))
    assert not gone, f"client methods whose operation the schema no longer has: {gone}"
    routes = {(row.method, row.path): op for op, row in OPERATIONS.items()}
    for operation_id, (method, route) in published.items():
        assert routes.get((method, route)) == operation_id, (method, route)


def test_the_table_names_exactly_the_client_methods_both_clients_have():
    named = [name for row in OPERATIONS.values() for name in row.client_methods]
    assert len(named) == len(set(named)), "a method is listed under two operations"
    assert set(named) == api_methods()
    for name in named:
        assert callable(getattr(Client, name))
        asynchronous = getattr(AsyncClient, name)
        # An async client's method is the shared definition over async runners: it answers
        # a coroutine (or an async iterator for lists) when called.
        assert callable(asynchronous)


ARGUMENTS: dict[str, Any] = {
    "events": [{"event_id": "e-1", "author": "user"}],
    "memories": [{"content": "text", "idempotency_key": "k-1"}],
    "event": {"event_id": "e-1", "author": "user"},
    "current_input": {"role": "user", "parts": [{"text": "hi"}]},
    "data": b"bytes",
    "tool_name": "lookup",
    "granted": True,
    "content": "text",
    "query": "text",
    "checkpoint": {"type": "json", "data_base64": ""},
    "channel_versions": {"messages": "1"},
    "writes": [{"idx": 0, "channel": "messages", "type": "json", "data_base64": ""}],
}


def call_arguments(function: Any) -> tuple[list[Any], dict[str, Any]]:
    positional, keywords = [], {}
    for name, parameter in list(inspect.signature(function).parameters.items())[1:]:
        if parameter.kind in (parameter.VAR_KEYWORD, parameter.VAR_POSITIONAL):
            continue
        if parameter.default is not parameter.empty:
            continue
        value = ARGUMENTS.get(name, f"{name.replace('_', '-')}-1")
        if parameter.kind == parameter.KEYWORD_ONLY:
            keywords[name] = value
        else:
            positional.append(value)
    return positional, keywords


def route_pattern(route: str) -> re.Pattern[str]:
    return re.compile("^" + re.sub(r"\\\{[a-z_]+\\\}", "[^/]+", re.escape(route)) + "(\\?.*)?$")


@pytest.mark.parametrize(
    ("operation_id", "name"),
    [(op, name) for op, row in OPERATIONS.items() for name in row.client_methods],
)
def test_each_method_sends_the_request_of_its_operation(scripted_server, operation_id, name):
    row = OPERATIONS[operation_id]
    scripted_server.default = (
        200,
        {},
        {"results": [], "next": None, "previous": None, "data_base64": ""},
    )
    args, kwargs = call_arguments(getattr(Client, name))
    with Client(scripted_server.url, "ctx_test", max_retries=0) as client:
        result = getattr(client, name)(*args, **kwargs)
        if inspect.isgenerator(result):
            list(result)

    async def run_async() -> None:
        async with AsyncClient(scripted_server.url, "ctx_test", max_retries=0) as client:
            result = getattr(client, name)(*args, **kwargs)
            if inspect.isasyncgen(result):
                [item async for item in result]
            else:
                assert inspect.iscoroutine(result)
                await result

    asyncio.run(run_async())
    sent = [(r["method"], r["path"]) for r in scripted_server.received]
    assert len(sent) == 2 and sent[0] == sent[1], sent
    method, target = sent[0]
    assert method == row.method
    assert route_pattern(row.path).match(target), (target, row.path)
