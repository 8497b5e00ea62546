"""The orchestrated operations' one-line summaries and examples in the API documentation:
the next turn of a travel agent's session, as the API answers it."""

from __future__ import annotations

from ctxadmin.api.schema import operation_docs

NEXT_INPUT = {"role": "user", "parts": [{"text": "And the return flight?"}]}

CONTEXT = {
    "envelope": {
        "current_input": {"parts": [{"text": "And the return flight?"}], "role": "user"},
        "generation_config": None,
        "history": [
            {
                "author": "user",
                "content": {"parts": [{"text": "Book me a window seat to Lisbon"}], "role": "user"},
                "event_id": "e1",
                "invocation_id": "i1",
                "timestamp": "2026-06-01T09:30:12.471129+00:00",
            },
            {
                "author": "travel_agent",
                "content": {"parts": [{"text": "Done: seat 12A, Friday."}], "role": "model"},
                "event_id": "e2",
                "invocation_id": "i1",
                "timestamp": "2026-06-01T09:30:12.471129+00:00",
            },
        ],
        "instructions": None,
        "memory": [],
        "tools": [],
    },
    "accounting": {
        "build_ms": 1.277,
        "bytes": {
            "current_input": 59,
            "framing": 120,
            "generation_config": 0,
            "history": 361,
            "instructions": 0,
            "memory": 0,
            "tools": 0,
            "total": 540,
        },
        "bytes_per_token": 4,
        "compaction_id": None,
        "events": {
            "checkpoints": 0,
            "dropped": 0,
            "dropped_by_budget": 0,
            "dropped_by_filter": 0,
            "dropped_by_window": 0,
            "hidden_by_compaction": 0,
            "input": 2,
            "recalled": 0,
            "restored_calls": 0,
            "selected": 2,
            "without_content": 0,
        },
        "memory_hits": 0,
        "tokens": {
            "current_input": 15,
            "framing": 30,
            "generation_config": 0,
            "history": 91,
            "instructions": 0,
            "memory": 0,
            "tools": 0,
            "total": 135,
        },
        "truncated": False,
    },
    "context_fingerprint": "ab89210a71bcad4d81d8f4c041aa52808bafcbf17d3dfbbbfcc2bfa978f70144",
}

INVOCATION = {
    "invocation_id": "turn-2",
    "status": "completed",
    "content": {"role": "model", "parts": [{"text": "Noted (22 characters, 3 contents)."}]},
    "function_calls": [],
    "usage": {"input_tokens": 55, "output_tokens": 12, "cached_tokens": None},
    "cache": {"status": "off"},
    "compaction": {"pre_request_id": None, "queued_id": None},
    "ingestion": {"mode": "off"},
    "context": {"tokens": 142, "memory_hits": 0, "events": 2},
    "event_ids": {"input": "turn-2.input", "output": ["turn-2.model"]},
    "timings": {"provider_ms": 0.039, "total_ms": 11.363},
}

DOCS = {
    "context_build": {
        "summary": "Build the bounded context for the next model call",
        "request": {
            "current_input": NEXT_INPUT,
            "policy": {"budgets": {"max_tokens": 2000}, "overflow": "truncate"},
        },
        "200": CONTEXT,
    },
    "invocations_run": {
        "summary": "Run one model call with managed context and memory",
        "request": {
            "invocation_id": "turn-2",
            "input": NEXT_INPUT,
            "agent": {
                "provider": "fake",
                "model": "fake-1",
                "instructions": "You are a travel agent.",
            },
            "memory_retrieval": {"mode": "hybrid", "limit": 3},
            "cache": "off",
        },
        "201": INVOCATION,
    },
}

add_operation_docs = operation_docs(DOCS)
