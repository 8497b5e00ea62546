"""The tenancy operations' one-line summaries and examples in the API documentation."""

from __future__ import annotations

from ctxadmin.api.schema import operation_docs

#: A key as the API shows it (never its secret, which only ``key`` of a new key carries).
KEY = {
    "app": "demo",
    "name": "billing worker",
    "prefix": "yhiknyw5hk",
    "scopes": ["memory", "sessions"],
    "state": "active",
    "created_at": "2026-06-01T09:30:12.517676Z",
    "last_used_at": None,
    "revoked_at": None,
}
NEW_KEY = {**KEY, "key": "ctx_yhiknyw5hk_EXAMPLE-secret-shown-once-store-it-now-0000"}
OWNER_KEY = {
    **KEY,
    "name": "demo owner",
    "prefix": "hnye77x1e1",
    "scopes": ["admin", "cache", "delegate", "diagnostics", "memory", "sessions"],
    "last_used_at": "2026-06-01T09:41:03.462276Z",
}

DOCS = {
    "app_summary": {"summary": "Content-free counts about the app"},
    "app_update": {
        "summary": "Change the app's display name",
        "request": {"display_name": "Demo travel agent"},
    },
    "current_api_key": {"summary": "The calling key's own metadata", "200": OWNER_KEY},
    "api_keys_list": {
        "summary": "List the app's API keys",
        "200": {"results": [KEY, OWNER_KEY], "next": None, "previous": None},
    },
    "api_keys_create": {
        "summary": "Create an API key (its secret shown once)",
        "request": {"name": "billing worker", "scopes": ["sessions", "memory"]},
        "201": NEW_KEY,
    },
    "api_key_get": {"summary": "One API key by prefix", "200": KEY},
    "api_key_revoke": {"summary": "Revoke an API key"},
    "api_key_rotate": {
        "summary": "Replace an API key with a new one and revoke it",
        "201": {
            **NEW_KEY,
            "prefix": "ksykmxgimn",
            "key": "ctx_ksykmxgimn_EXAMPLE-secret-shown-once-store-it-now-0000",
        },
    },
}

add_operation_docs = operation_docs(DOCS)
