"""The API documentation's groups of operations (pure: the settings read ``TAGS``)."""

from __future__ import annotations

# The documentation's groups, by the first rule a path matches (order matters: a session's
# events before its session, memory ingestion before memory).
TAG_RULES = (
    ("/outbox/", "outbox"),
    ("/memories/ingestions", "outbox"),
    ("/cache/", "cache"),
    ("/invocations", "invocations"),
    ("/compaction", "compaction"),
    ("/context", "context"),
    ("/artifacts", "artifacts"),
    ("/threads", "threads"),
    ("/checkpoints", "threads"),
    ("/sessions/{sid}/events", "events"),
    ("/memories", "memory"),
    ("/memory-policy", "memory"),
    ("/profile", "memory"),
    ("/key", "keys"),
    ("/tool-token", "keys"),
    ("/sessions", "sessions"),
    ("/state", "sessions"),
)
TAGS = [
    {"name": "sessions", "description": "Sessions and their state."},
    {"name": "events", "description": "A session's events: append (ADK-shaped) and page."},
    {"name": "context", "description": "The bounded, secret-free request for a model call."},
    {"name": "compaction", "description": "Compaction policies and compactions."},
    {"name": "memory", "description": "Long-term memory of a user: add, list, search, erase."},
    {"name": "outbox", "description": "Durable ingestion of session events into memory."},
    {"name": "cache", "description": "The provider prefix-cache registry."},
    {"name": "invocations", "description": "One model call with managed context; tool tokens."},
    {"name": "artifacts", "description": "Versioned artifacts of a session or a user."},
    {"name": "threads", "description": "Graph threads: LangGraph checkpoints and writes."},
    {"name": "keys", "description": "API keys: the caller's, the app's; create, rotate, revoke."},
    {"name": "diagnostics", "description": "The app's content-free summary and settings."},
]


def tag_for(path: str) -> str:
    for fragment, tag in TAG_RULES:
        if fragment in path:
            return tag
    return "diagnostics"
