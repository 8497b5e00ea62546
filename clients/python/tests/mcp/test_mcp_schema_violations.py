"""Arguments that violate a tool's input schema (generated from the schema each tool lists)
get a tool error naming the argument, never an internal error, and nothing half-applies."""

from __future__ import annotations

import asyncio

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp import ClientSession
from test_mcp_tools import _session_run, mcp_url, structured

# What a JSON body may carry: a NUL, an unpaired surrogate or an integer past 64 bits is
# refused with the body (an HTTP 400), before any tool sees it.
TEXT = st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00")
INT64 = st.integers(-(2**63), 2**63 - 1)
JSON_TYPES = {
    "string": st.text(TEXT, max_size=20),
    "integer": st.integers(-(10**6), 10**6),
    "boolean": st.booleans(),
    "object": st.dictionaries(st.text(TEXT, max_size=5), INT64, max_size=2),
    "array": st.lists(INT64, max_size=2),
    "null": st.none(),
}


def _listed_tools(app) -> list:
    async def work(session: ClientSession):
        return (await session.list_tools()).tools

    return asyncio.run(_session_run(mcp_url(app), app.key, work))


def _valid_base(schema: dict) -> dict:
    """The required arguments, each with a value of its type (and within its bounds)."""
    samples = {"string": "x", "integer": 1, "boolean": True, "object": {}}
    return {name: samples[schema["properties"][name]["type"]] for name in schema["required"]}


@st.composite
def violations(draw, tools):
    """(tool, arguments, the argument that is wrong)."""
    tool = draw(st.sampled_from(tools))
    schema = tool.inputSchema
    arguments = _valid_base(schema)
    kind = draw(st.sampled_from(["wrong_type", "unknown", "missing"]))
    if kind == "missing" and schema["required"]:
        name = draw(st.sampled_from(schema["required"]))
        del arguments[name]
        return tool.name, arguments, name
    if kind == "unknown" or not schema["properties"]:
        name = draw(st.text("abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=12))
        if name in schema["properties"]:
            name += "_extra"
        arguments[name] = draw(st.one_of(*JSON_TYPES.values()))
        return tool.name, arguments, name
    name = draw(st.sampled_from(sorted(schema["properties"])))
    declared = schema["properties"][name]["type"]
    wrong = draw(st.sampled_from([t for t in JSON_TYPES if t != declared]))
    if declared == "integer" and wrong == "boolean":
        wrong = "string"
    arguments[name] = draw(JSON_TYPES[wrong])
    return tool.name, arguments, name


def test_schema_violations_are_tool_errors_naming_the_argument(make_app):
    app = make_app()
    tools = _listed_tools(app)

    @settings(
        max_examples=60,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(violations(tools))
    def check(case):
        name, arguments, wrong = case

        async def work(session: ClientSession):
            return await session.call_tool(name, arguments)

        result = asyncio.run(_session_run(mcp_url(app), app.key, work))
        assert result.isError
        error = structured(result)["error"]
        assert error["code"] == "validation_error", error
        assert error["details"]["field"].split(".")[0] == wrong[:64], error

    check()

    # Nothing half-applied: no memory, session or event was written by any of them.
    async def look(session: ClientSession):
        return await session.call_tool("session_list", {"user_id": "x"}), await session.call_tool(
            "memory_search", {"user_id": "x", "query": "x", "mode": "lexical"}
        )

    sessions, hits = asyncio.run(_session_run(mcp_url(app), app.key, look))
    assert structured(sessions)["sessions"] == []
    assert structured(hits)["hits"] == []
