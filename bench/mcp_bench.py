"""An MCP ``memory_search`` call against the same search through REST.

The same lexical search of one user's memories, on one kept-alive connection each: through
the REST API (``POST …/memories/search`` with ``httpx.AsyncClient``) and as an MCP tool call
(the official ``mcp`` client's streamable HTTP session, initialised once). The difference at
p50 is what MCP adds: the WSGI-to-ASGI bridge, the SDK's JSON-RPC handling and the worker thread
hop. Target: at most 3 ms at p50.

``make bench`` runs it against its service; alone, ``python -m bench.mcp_bench`` starts a
service of its own (in ``var/bench-mcp``) and rewrites the "MCP" section of
``bench/BENCHMARKS.md``.
"""

from __future__ import annotations

import asyncio
import time

import httpx

from bench.alone import run_alone
from bench.service import bench_client
from bench.timing import percentiles

SECTION = "## MCP"
MEMORIES = 200
REPS = 300
WARMUP = 60  # every web thread of every worker has served both paths
TARGET_MS = 3.0
USER = "mcp-bench"
QUERY = {"query": "order invoice refund", "mode": "lexical", "limit": 10}


async def _alternating(first, second, reps: int) -> tuple[list[float], list[float]]:
    """Each call timed, the two paths taking turns call by call, so that both see the same
    machine (a load that comes and goes falls on both alike)."""
    for _ in range(WARMUP):
        await first()
        await second()
    samples: tuple[list[float], list[float]] = ([], [])
    for index in range(2 * reps):
        call, into = (first, samples[0]) if index % 2 == 0 else (second, samples[1])
        started = time.perf_counter()
        await call()
        into.append((time.perf_counter() - started) * 1000)
    return samples


async def _measure(base_url: str, app: str, key: str) -> dict:
    from mcp import ClientSession
    from mcp.client.streamable_http import streamablehttp_client

    headers = {"Authorization": f"Bearer {key}"}
    search_url = f"{base_url}/api/v1/apps/{app}/users/{USER}/memories/search"
    async with httpx.AsyncClient(headers=headers, timeout=30) as http:
        for index in range(MEMORIES):
            topic = ("order", "invoice", "refund", "delivery")[index % 4]
            answer = await http.post(
                f"{base_url}/api/v1/apps/{app}/users/{USER}/memories",
                json={"content": f"memory {index}: the customer asked about the {topic} again"},
            )
            answer.raise_for_status()

        async def rest() -> None:
            (await http.post(search_url, json=QUERY)).raise_for_status()

        async with streamablehttp_client(f"{base_url}/mcp", headers=headers) as (read, write, _):
            async with ClientSession(read, write) as session:
                await session.initialize()

                async def tool() -> None:
                    result = await session.call_tool("memory_search", {"user_id": USER, **QUERY})
                    if result.isError:
                        raise RuntimeError(result.content[0].text)

                rest_ms, mcp_ms = await _alternating(rest, tool, REPS)
    rest_p, mcp_p = percentiles(rest_ms), percentiles(mcp_ms)
    return {
        "rest": rest_p,
        "mcp": mcp_p,
        "added_p50_ms": round(mcp_p["p50"] - rest_p["p50"], 2),
        "ratio_p50": round(mcp_p["p50"] / rest_p["p50"], 2),
        "ratio_p95": round(mcp_p["p95"] / rest_p["p95"], 2),
    }


def measure(service) -> dict:
    api = bench_client(service, "mcp", "memory")
    return asyncio.run(_measure(service.base_url, api.app, api.key))


def report(results: dict) -> str:
    met = "met" if results["added_p50_ms"] <= TARGET_MS else "NOT met"
    return f"""{SECTION}

The same lexical `memory_search` (limit 10) over {MEMORIES} memories of one user, {REPS} calls
each on one kept-alive connection, the two paths taking turns call by call: through REST
(`POST …/memories/search`, `httpx`) and as an MCP tool call (the official `mcp` client's
streamable HTTP session).

| path | p50 ms | p95 ms |
| --- | --- | --- |
| REST | {results["rest"]["p50"]} | {results["rest"]["p95"]} |
| MCP `tools/call` | {results["mcp"]["p50"]} | {results["mcp"]["p95"]} |
| MCP / REST | {results["ratio_p50"]}x | {results["ratio_p95"]}x |

MCP adds {results["added_p50_ms"]} ms at p50 (target: at most {TARGET_MS} ms; {met}).
"""


def main() -> None:
    run_alone("mcp_bench", "bench-mcp", SECTION, measure, report, "\n\n| path")


if __name__ == "__main__":
    main()
