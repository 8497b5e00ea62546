"""The memory operations' one-line summaries and examples in the API documentation: what
a travel agent keeps about its user, as the API answers it."""

from __future__ import annotations

from ctxadmin.api.schema import operation_docs

MEMORY = {
    "id": "7939cdaa-b97a-4b3a-a805-d87dac3923ce",
    "content": "Alice prefers window seats",
    "metadata": {"topic": "travel"},
    "provenance": {"session_id": None, "event_id": None, "author": None, "timestamp": None},
    "idempotency_key": None,
    "sha256": "f2c30346e3e72b2b7c37dd9c5488e6ad61781b96796bd130d16acc7c00227959",
    "embedding_model": "hashing-v2-384",
    "created_at": "2026-06-01T09:30:12.491753+00:00",
    "expires_at": None,
    "retain_until": None,
    "key": "preference.seat",
    "valid_from": "2026-06-01T09:30:12.491753+00:00",
    "valid_to": None,
    "recorded_at": "2026-06-01T09:30:12.491753+00:00",
    "retired_at": None,
    "superseded_by": None,
    "supersedes": None,
    "near_duplicate_of": None,
}

HITS = {
    "hits": [
        {
            "id": "7939cdaa-b97a-4b3a-a805-d87dac3923ce",
            "content": "Alice prefers window seats",
            "score": 0.016393,
            "score_type": "rrf",
            "timestamp": "2026-06-01T09:30:12.491753+00:00",
            "metadata": {"topic": "travel"},
            "provenance": {"session_id": None, "event_id": None, "author": None},
        }
    ]
}

INGESTION = {
    "job_id": "a9e69dc1-7fd2-72a2-0d82-577ee267d591",
    "status_url": "https://ctx.example.com/api/v1/apps/demo/outbox/jobs/a9e69dc1-7fd2-72a2-0d82-577ee267d591",
    "deduplicated": False,
    "phase": "pending",
    "events": 4,
    "first_seq": 1,
    "last_seq": 4,
    "erasure_epoch": 0,
    "more": False,
    "next_after_seq": None,
}

DOCS = {
    "memories_list": {
        "summary": "List the user's memories",
        "200": {"results": [MEMORY], "next": None, "previous": None},
    },
    "memories_add": {
        "summary": "Add a memory",
        "request": {
            "content": "Alice prefers window seats",
            "metadata": {"topic": "travel"},
            "key": "preference.seat",
        },
        "201": MEMORY,
    },
    "memories_erase": {"summary": "Erase the user's memories (or one session's)"},
    "memories_get": {"summary": "One memory by id", "200": MEMORY},
    "memories_delete": {"summary": "Erase one memory"},
    "memories_search": {
        "summary": "Search the user's memories (lexical, vector or hybrid)",
        "request": {"query": "which seat does Alice like?", "limit": 3},
        "200": HITS,
    },
    "memories_add_batch": {
        "summary": "Add memories in one transaction (all or none)",
        "request": {
            "memories": [
                {"content": "Alice prefers window seats", "idempotency_key": "seat"},
                {"content": "Alice is vegetarian", "idempotency_key": "food"},
            ]
        },
        "200": {
            "memories": [
                {"memory": {**MEMORY, "idempotency_key": "seat"}, "created": True},
                {
                    "memory": {
                        **MEMORY,
                        "id": "0d4c7a4e-58a4-4f4e-9b8e-3f0a5c2b9e11",
                        "content": "Alice is vegetarian",
                        "sha256": MEMORY["sha256"][::-1],
                        "idempotency_key": "food",
                    },
                    "created": True,
                },
            ]
        },
    },
    "memory_users_list": {
        "summary": "List the app's users that hold memories",
        "200": {"results": [{"user_id": "alice"}], "next": None, "previous": None},
    },
    "memories_history": {"summary": "The versions of a memory's key"},
    "memories_rollback": {"summary": "Restore a version of a memory as a new version"},
    "memory_profile": {"summary": "The user's profile: live facts under key prefixes"},
    "memories_touch": {
        "summary": "Refresh the time to live of memories",
        "request": {"ids": ["7939cdaa-b97a-4b3a-a805-d87dac3923ce"]},
        "200": {
            "memories": [
                {
                    "id": "7939cdaa-b97a-4b3a-a805-d87dac3923ce",
                    "expires_at": "2026-06-01T10:30:12.491753+00:00",
                }
            ]
        },
    },
    "memories_add_events": {"summary": "Add memories from events (ADK's add_events_to_memory)"},
    "memories_ingestions_admit": {
        "summary": "Queue a session's events for memory ingestion",
        "request": {"session_id": "s1"},
        "202": INGESTION,
    },
    "memory_policy_get": {"summary": "The app's memory policy"},
    "memory_policy_put": {"summary": "Replace the app's memory policy"},
    "memory_consent_get": {"summary": "The user's consent to long-term memory"},
    "memory_consent_put": {"summary": "Record the user's consent to long-term memory"},
    "memory_legal_hold_get": {"summary": "The legal hold on the user's memory"},
    "memory_legal_hold_put": {"summary": "Place a legal hold on the user's memory"},
    "memory_legal_hold_delete": {"summary": "Lift the legal hold on the user's memory"},
    "memory_erasure_epoch_get": {"summary": "The user's current erasure epoch"},
    "outbox_job_get": {"summary": "An ingestion job's status"},
    "outbox_job_cancel": {"summary": "Cancel an active ingestion job"},
    "outbox_stats": {"summary": "Content-free counts of the app's ingestion outbox"},
}

add_operation_docs = operation_docs(DOCS)
