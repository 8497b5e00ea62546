"""``make bench``: measure ctxadmin through its HTTP API, and the peer in the same run.

Starts the whole service (``manage.py run``: embedded PostgreSQL 18 + pgvector, Redis,
Celery, gunicorn with 4 workers) in ``var/bench``, drives it with HTTP clients on loopback,
runs Google ADK's ``DatabaseSessionService`` on the same PostgreSQL server (``bench/adk_peer``),
ADK's session service through the Python client beside it (``bench/adk_client_bench``),
the OpenAI Agents SDK's session on ctxadmin beside the SDK's ``SQLAlchemySession`` on the
same PostgreSQL server (``bench/openai_agents_bench``),
LangGraph's saver and store through the client beside LangGraph's Postgres backends
(``bench/langgraph_client_bench``),
an MCP ``memory_search`` against the same search through REST (``bench/mcp_bench``),
and LangGraph's ``PostgresStore`` for memory search (``bench/langgraph_peer``), and writes them,
with their ratios, the command and the machine, to ``bench/BENCHMARKS.md`` (``--skip-peer``:
no peer). Then the evidence a built context holds at fixed budgets
(``bench/evidence_bench``; alone with ``--only evidence``), facts over time: the
point-in-time suite and what keys cost beside the code before them (``bench/facts_bench``;
alone with ``--only facts``), the secret detectors and their
cost per KiB (``bench/redaction_bench``; alone with ``--only redaction``), the extraction
evaluation (``bench/extraction_bench``; alone with ``--only extraction``; a model only when
``CTXADMIN_EVAL_OPENAI_BASE_URL`` and ``CTXADMIN_EVAL_OPENAI_MODEL`` name one), and last,
the load and fault runs (``bench/load_bench``) against a service of their own.

    .venv/bin/python -m bench [--skip-peer] [--events 2000] [--big-events 10000]
                              [--sessions 100000] [--only evidence [--columns C,...]]
                              [--only redaction] [--only facts] [--only extraction]
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime

from bench import (
    adk_client_bench,
    adk_peer,
    cache_bench,
    evidence_bench,
    extraction_bench,
    facts_bench,
    invocation_bench,
    langgraph_client_bench,
    load_bench,
    locomo,
    mcp_bench,
    memory_bench,
    openai_agents_bench,
    outbox_bench,
    redaction_bench,
    secret_bench,
    sessions_bench,
)
from bench.machine import machine, postgres_version
from bench.report import write_report
from bench.sections import REPORT, splice
from bench.service import bench_client, bench_service, stop_service
from ctxadmin import stack


def main() -> None:
    parser = argparse.ArgumentParser(description="ctxadmin benchmarks")
    parser.add_argument("--events", type=int, default=2000)
    parser.add_argument("--big-events", type=int, default=10000)
    parser.add_argument("--sessions", type=int, default=100000)
    parser.add_argument("--skip-peer", action="store_true")
    parser.add_argument("--memory-big", type=int, default=100000)
    parser.add_argument("--memory-small", type=int, default=10000)
    parser.add_argument(
        "--only",
        choices=["evidence", "redaction", "facts", "extraction"],
        help="run one section alone (its own service) and rewrite it in BENCHMARKS.md",
    )
    parser.add_argument(
        "--columns",
        help="with --only evidence: a comma-separated subset of its columns, the default "
        "embedder alone; printed, not written to BENCHMARKS.md",
    )
    args = parser.parse_args()
    args.raw = sys.argv[1:]
    if args.only == "redaction":
        redaction_bench.run_section("python -m bench --only redaction")  # in process
        return
    if args.only == "extraction":
        extraction_bench.run_section("python -m bench --only extraction")  # in process
        return
    if args.only == "facts":
        facts_bench.run_section("python -m bench --only facts")  # services of its own
        return
    if args.only == "evidence":
        if args.columns:
            evidence_bench.run_columns(args.columns.split(","))
        else:
            evidence_bench.run_section("python -m bench --only evidence")
        return

    # The service reaches its Gemini cache provider here: it must answer before it starts.
    fake_gemini = cache_bench.start_provider()
    service = bench_service(stack.var_dir() / "bench", cache_bench.service_env(fake_gemini))
    try:
        api = bench_client(service, "bench", "sessions", "memory")
        print("measuring ctxadmin …", flush=True)
        ours = sessions_bench.measure(service, api, args)
        print(json.dumps(ours, indent=2), flush=True)
        print("replaying LoCoMo with automatic compaction …", flush=True)
        compaction = locomo.measure(api)
        print(
            json.dumps({k: v for k, v in compaction.items() if k != "conversations"}, indent=2),
            flush=True,
        )
        print("measuring memory search …", flush=True)
        memory = memory_bench.measure(
            service,
            api,
            big=args.memory_big,
            small=args.memory_small,
            skip_langgraph=args.skip_peer,
        )
        print("measuring the ingestion outbox …", flush=True)
        outbox = outbox_bench.measure(service, api)
        print("measuring the prefix-cache registry …", flush=True)
        cache = cache_bench.measure(service, bench_client(service, "cache", "cache"), fake_gemini)
        print("measuring invocations …", flush=True)
        invocations = invocation_bench.measure(bench_client(service, "invoke", "sessions"))
        print("measuring MCP against REST …", flush=True)
        mcp = mcp_bench.measure(service)
        peer = adk_client = openai_agents = langgraph_client = None
        if not args.skip_peer:
            print("measuring LangGraph's backends through the client …", flush=True)
            langgraph_client = langgraph_client_bench.measure(service)
            print("measuring ADK's session service through the client …", flush=True)
            adk_client = adk_client_bench.measure(service)
            print("measuring the OpenAI Agents SDK session against SQLAlchemy …", flush=True)
            openai_agents = openai_agents_bench.measure(service)
            print("measuring the peer (ADK DatabaseSessionService) …", flush=True)
            peer = adk_peer.run(service.database_url, events=args.events)
            print(json.dumps({k: v for k, v in peer.items() if k != "notes"}, indent=2), flush=True)
        info = {
            "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": machine(),
            "postgres": postgres_version(service.database_url),
        }
    finally:
        stop_service(service)
        fake_gemini.stop()
    write_report(ours, peer, info, args, compaction, memory, outbox, cache, invocations)
    REPORT.write_text(splice(REPORT.read_text(), mcp_bench.report(mcp), mcp_bench.SECTION))
    if adk_client is not None:
        section = adk_client_bench.report(adk_client)
        REPORT.write_text(splice(REPORT.read_text(), section, adk_client_bench.SECTION))
    if openai_agents is not None:
        section = openai_agents_bench.report(openai_agents)
        REPORT.write_text(splice(REPORT.read_text(), section, openai_agents_bench.SECTION))
    if langgraph_client is not None:
        section = langgraph_client_bench.report(langgraph_client)
        REPORT.write_text(splice(REPORT.read_text(), section, langgraph_client_bench.SECTION))
    print(f"wrote {REPORT}")
    print("measuring evidence in context …", flush=True)
    evidence_bench.run_section("make bench")  # a service of its own: a fresh memory
    print("measuring facts over time …", flush=True)
    facts_bench.run_section("make bench")  # services of its own, beside the code before facts
    print("measuring the secret detectors …", flush=True)
    secret_bench.run_section("make bench")  # in process: no service
    redaction_bench.run_section("make bench")
    print("evaluating the extractors …", flush=True)
    extraction_bench.run_section("make bench")  # in process; a model only when one is named
    # In var/load, with a Redis of its own: its faults disturb nothing measured above.
    load_failures = load_bench.run_section("make bench")
    if cache["failures"]:
        sys.exit("prefix cache targets not met: " + "; ".join(cache["failures"]))
    if load_failures:
        sys.exit("load and fault targets not met: " + "; ".join(load_failures))


if __name__ == "__main__":
    main()
