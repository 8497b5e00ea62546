"""The session operations' one-line summaries and examples in the API documentation: the
values a travel agent's first turns produce, as the API answers them."""

from __future__ import annotations

from ctxadmin.api.schema import operation_docs

USER_TEXT = {"role": "user", "parts": [{"text": "Book me a window seat to Lisbon"}]}
MODEL_TEXT = {"role": "model", "parts": [{"text": "Done: seat 12A, Friday."}]}
APPENDED = [
    {"event_id": "e1", "invocation_id": "i1", "author": "user", "content": USER_TEXT},
    {"event_id": "e2", "invocation_id": "i1", "author": "travel_agent", "content": MODEL_TEXT},
]

EVENTS = [
    {
        "event_id": "e1",
        "seq": 1,
        "invocation_id": "i1",
        "author": "user",
        "content": {"role": "user", "parts": [{"text": "Book me a window seat to Lisbon"}]},
        "partial": False,
        "turn_complete": None,
        "actions": {},
        "timestamp": "2026-06-01T09:30:12.471129+00:00",
        "usage_metadata": None,
        "custom_metadata": None,
        "byte_size": 259,
        "token_estimate": 65,
        "content_hash": "7a4d60c78d544788a08ed261148dbbb4308d21c8055ece7c5cce3bd6e49e14ba",
        "stored": True,
    },
    {
        "event_id": "e2",
        "seq": 2,
        "invocation_id": "i1",
        "author": "travel_agent",
        "content": {"role": "model", "parts": [{"text": "Done: seat 12A, Friday."}]},
        "partial": False,
        "turn_complete": None,
        "actions": {},
        "timestamp": "2026-06-01T09:30:12.471129+00:00",
        "usage_metadata": None,
        "custom_metadata": None,
        "byte_size": 260,
        "token_estimate": 65,
        "content_hash": "cf5fcc8d60f6277ab6242697ee3500c86db0b9d22c233df83ca0853d62c45730",
        "stored": True,
    },
]

SESSION_ROW = {
    "session_id": "s1",
    "user_id": "alice",
    "revision": 1,
    "event_count": 2,
    "created_at": "2026-06-01T09:30:12.46544+00:00",
    "updated_at": "2026-06-01T09:30:12.471129+00:00",
}
SESSION = {**SESSION_ROW, "app": "demo", "state": {"seat": "window"}, "events_complete": True}
USER_TOKEN = {
    "prefix": "k3v9q2xw7p",
    "app": "demo",
    "user_id": "alice",
    "session_id": None,
    "label": "claude desktop",
    "capabilities": ["identity", "memory_add", "memory_search"],
    "state": "active",
    "created_by_key": "hnye77x1e1",
    "created_at": "2026-06-01T09:30:12Z",
    "expires_at": "2026-06-01T10:30:12Z",
    "last_used_at": None,
    "revoked_at": None,
    "revoked_reason": None,
}
POLICY = {"token_threshold": 8000, "retain_recent_exchanges": 2, "retention": "hide"}

DOCS = {
    "app_sessions_list": {"summary": "List the app's sessions of every user"},
    "user_state": {"summary": "The user's user: and app: state"},
    "sessions_list": {
        "summary": "List a user's sessions",
        "200": {"results": [SESSION_ROW], "next": None, "previous": None},
    },
    "sessions_create": {
        "summary": "Create a session",
        "request": {"session_id": "s1", "state": {"seat": "window"}},
        "201": {**SESSION, "revision": 0, "event_count": 0, "events": []},
    },
    "sessions_get": {
        "summary": "A session with its state and events",
        "200": {**SESSION, "events": EVENTS},
    },
    "sessions_delete": {"summary": "Delete a session with its events and state"},
    "events_list": {
        "summary": "List a session's events in order",
        "200": {"results": EVENTS, "next": None, "previous": None},
    },
    "events_append": {
        "summary": "Append events (one or a batch)",
        "request": {"events": APPENDED},
        "201": {
            "events": EVENTS,
            "created": 2,
            "revision": 1,
            "updated_at": "2026-06-01T09:30:12.471129+00:00",
            "state": {"seat": "window"},
        },
    },
    "session_state": {"summary": "The session's state with the user: and app: state"},
    "tool_tokens_mint": {
        "summary": "Mint a tool token for a function call the model made",
        "request": {
            "tool_name": "lookup_booking",
            "capabilities": ["memory_search"],
            "ttl_ms": 300000,
        },
    },
    "tool_tokens_revoke": {"summary": "Revoke a tool token"},
    "tool_token_identity": {"summary": "What the calling tool token is bound to"},
    "user_tokens_list": {"summary": "List the user's tokens"},
    "user_tokens_mint": {
        "summary": "Mint a user token (e.g. for an MCP client)",
        "request": {
            "capabilities": ["memory_search", "memory_add"],
            "label": "claude desktop",
            "ttl_ms": 3600000,
        },
    },
    "user_token_get": {"summary": "One user token by prefix", "200": USER_TOKEN},
    "user_tokens_revoke": {"summary": "Revoke a user token"},
    "app_user_tokens_list": {"summary": "List the app's user tokens of every user"},
    "app_user_tokens_revoke": {
        "summary": "Revoke the user tokens one API key minted",
        "request": {"minted_by": "hnye77x1e1"},
        "200": {"revoked": 3},
    },
    "app_compaction_policy_get": {"summary": "The app's default compaction policy"},
    "app_compaction_policy_put": {
        "summary": "Set the app's default compaction policy",
        "request": POLICY,
    },
    "app_compaction_policy_delete": {"summary": "Remove the app's default compaction policy"},
    "session_compaction_policy_get": {"summary": "A session's own compaction policy"},
    "session_compaction_policy_put": {
        "summary": "Set a session's own compaction policy",
        "request": POLICY,
    },
    "session_compaction_policy_delete": {"summary": "Remove a session's own compaction policy"},
    "compactions_list": {"summary": "List a session's compactions"},
    "compactions_request": {"summary": "Compact a session's history now", "request": {}},
    "compactions_get": {"summary": "One compaction of a session"},
    "artifacts_list": {"summary": "List the session's artifact names"},
    "artifacts_load": {"summary": "Load an artifact version with its bytes"},
    "artifacts_save": {"summary": "Save the next version of an artifact"},
    "artifacts_delete": {"summary": "Delete an artifact and all its versions"},
    "artifacts_attach": {
        "summary": "Attach an artifact version to the session as an event",
        "request": {"version": 0},
    },
    "artifacts_versions": {"summary": "List an artifact's versions"},
}

add_operation_docs = operation_docs(DOCS)
