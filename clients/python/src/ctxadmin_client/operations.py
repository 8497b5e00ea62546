"""Which client methods speak each operation of the API's OpenAPI schema
(``docs/openapi.yaml`` in the server's repository), by ``operationId``.

The test suite checks this table against the committed schema both ways: an operation
without a method, or a method whose operation is gone, fails it. To cover a new endpoint,
add its method to the operations modules and one line here.
"""

from __future__ import annotations

from typing import NamedTuple


class Operation(NamedTuple):
    method: str
    path: str
    client_methods: tuple[str, ...]


_APP = "/api/v1/apps/{app}"
_USER = _APP + "/users/{user}"
_SESSION = _USER + "/sessions/{sid}"

OPERATIONS: dict[str, Operation] = {
    # the caller, the app and its keys
    "whoami": Operation("GET", "/api/v1/whoami", ("whoami",)),
    "app_summary": Operation("GET", _APP + "/", ("get_app",)),
    "app_update": Operation("PATCH", _APP + "/", ("update_app",)),
    "current_api_key": Operation("GET", _APP + "/key", ("get_key",)),
    "api_keys_list": Operation("GET", _APP + "/keys", ("list_keys",)),
    "api_key_get": Operation("GET", _APP + "/keys/{prefix}", ("get_api_key",)),
    "api_key_revoke": Operation("DELETE", _APP + "/keys/{prefix}", ("revoke_api_key",)),
    "api_keys_create": Operation("POST", _APP + "/keys", ("create_api_key",)),
    "api_key_rotate": Operation("POST", _APP + "/keys/{prefix}/rotate", ("rotate_api_key",)),
    # user tokens
    "user_tokens_mint": Operation("POST", _USER + "/tokens", ("mint_user_token",)),
    "user_tokens_list": Operation("GET", _USER + "/tokens", ("list_user_tokens",)),
    "user_token_get": Operation("GET", _USER + "/tokens/{prefix}", ("get_user_token",)),
    "user_tokens_revoke": Operation("DELETE", _USER + "/tokens/{prefix}", ("revoke_user_token",)),
    "app_user_tokens_list": Operation("GET", _APP + "/user-tokens", ("list_app_user_tokens",)),
    "app_user_tokens_revoke": Operation(
        "POST", _APP + "/user-tokens/revoke", ("revoke_user_tokens_minted_by",)
    ),
    # prefix caches
    "cache_acquire": Operation("POST", _APP + "/cache/acquire", ("acquire_cache",)),
    "cache_invalidate": Operation("POST", _APP + "/cache/invalidate", ("invalidate_cache",)),
    "cache_scope_status": Operation(
        "GET", _APP + "/cache/scopes/{fingerprint}", ("cache_scope_status",)
    ),
    # compaction policies
    "app_compaction_policy_get": Operation(
        "GET", _APP + "/compaction-policy", ("get_app_compaction_policy",)
    ),
    "app_compaction_policy_put": Operation(
        "PUT", _APP + "/compaction-policy", ("set_app_compaction_policy",)
    ),
    "app_compaction_policy_delete": Operation(
        "DELETE", _APP + "/compaction-policy", ("delete_app_compaction_policy",)
    ),
    "session_compaction_policy_get": Operation(
        "GET", _SESSION + "/compaction-policy", ("get_session_compaction_policy",)
    ),
    "session_compaction_policy_put": Operation(
        "PUT", _SESSION + "/compaction-policy", ("set_session_compaction_policy",)
    ),
    "session_compaction_policy_delete": Operation(
        "DELETE", _SESSION + "/compaction-policy", ("delete_session_compaction_policy",)
    ),
    # sessions, events, state
    "app_sessions_list": Operation("GET", _APP + "/sessions", ("list_sessions",)),
    "sessions_list": Operation("GET", _USER + "/sessions", ("list_user_sessions",)),
    "sessions_create": Operation("POST", _USER + "/sessions", ("create_session",)),
    "sessions_get": Operation("GET", _SESSION, ("get_session",)),
    "sessions_delete": Operation("DELETE", _SESSION, ("delete_session",)),
    "events_list": Operation("GET", _SESSION + "/events", ("list_events",)),
    "events_append": Operation("POST", _SESSION + "/events", ("append_events", "append_event")),
    "session_state": Operation("GET", _SESSION + "/state", ("get_session_state",)),
    "user_state": Operation("GET", _USER + "/state", ("get_user_state",)),
    # context and compactions
    "context_build": Operation("POST", _SESSION + "/context", ("build_context",)),
    "compactions_list": Operation("GET", _SESSION + "/compactions", ("list_compactions",)),
    "compactions_request": Operation("POST", _SESSION + "/compactions", ("request_compaction",)),
    "compactions_get": Operation(
        "GET", _SESSION + "/compactions/{compaction_id}", ("get_compaction",)
    ),
    # invocations and tool tokens
    "invocations_run": Operation("POST", _SESSION + "/invocations", ("invoke",)),
    "tool_tokens_mint": Operation(
        "POST", _SESSION + "/invocations/{invocation}/tool-tokens", ("mint_tool_token",)
    ),
    "tool_tokens_revoke": Operation(
        "DELETE",
        _SESSION + "/invocations/{invocation}/tool-tokens/{prefix}",
        ("revoke_tool_token",),
    ),
    "tool_token_identity": Operation("GET", _APP + "/tool-token", ("get_tool_token_identity",)),
    # artifacts
    "artifacts_list": Operation("GET", _SESSION + "/artifacts", ("list_artifact_names",)),
    "artifacts_load": Operation(
        "GET", _SESSION + "/artifacts/{name}", ("load_artifact", "load_artifact_bytes")
    ),
    "artifacts_save": Operation("POST", _SESSION + "/artifacts/{name}", ("save_artifact",)),
    "artifacts_delete": Operation("DELETE", _SESSION + "/artifacts/{name}", ("delete_artifact",)),
    "artifacts_attach": Operation(
        "POST", _SESSION + "/artifacts/{name}/attach", ("attach_artifact",)
    ),
    "artifacts_versions": Operation(
        "GET", _SESSION + "/artifacts/{name}/versions", ("list_artifact_versions",)
    ),
    # graph threads (LangGraph checkpoints)
    "checkpoints_list": Operation("GET", _APP + "/checkpoints", ("list_checkpoints",)),
    "thread_delete": Operation("DELETE", _APP + "/threads/{thread}", ("delete_thread",)),
    "thread_checkpoints_list": Operation(
        "GET", _APP + "/threads/{thread}/checkpoints", ("list_thread_checkpoints",)
    ),
    "thread_checkpoints_put": Operation(
        "POST", _APP + "/threads/{thread}/checkpoints", ("put_checkpoint",)
    ),
    "thread_checkpoint_get": Operation(
        "GET", _APP + "/threads/{thread}/checkpoints/{checkpoint_id}", ("get_checkpoint",)
    ),
    "thread_checkpoint_writes_put": Operation(
        "POST",
        _APP + "/threads/{thread}/checkpoints/{checkpoint_id}/writes",
        ("put_checkpoint_writes",),
    ),
    # memory
    "memories_add": Operation("POST", _USER + "/memories", ("add_memory",)),
    "memories_erase": Operation(
        "DELETE", _USER + "/memories", ("erase_session_memories", "erase_user_memories")
    ),
    "memories_list": Operation("GET", _USER + "/memories", ("list_memories",)),
    "memories_get": Operation("GET", _USER + "/memories/{memory_id}", ("get_memory",)),
    "memories_delete": Operation("DELETE", _USER + "/memories/{memory_id}", ("delete_memory",)),
    "memories_search": Operation("POST", _USER + "/memories/search", ("search_memory",)),
    "memories_add_batch": Operation("POST", _USER + "/memories/batch", ("add_memories",)),
    "memory_users_list": Operation("GET", _APP + "/memory-users", ("list_memory_users",)),
    "memories_touch": Operation("POST", _USER + "/memories/touch", ("touch_memories",)),
    "memories_history": Operation(
        "GET", _USER + "/memories/{memory_id}/history", ("memory_history",)
    ),
    "memories_rollback": Operation(
        "POST", _USER + "/memories/{memory_id}/rollback", ("rollback_memory",)
    ),
    "memory_profile": Operation("GET", _USER + "/profile", ("profile",)),
    "memories_add_events": Operation("POST", _USER + "/memories/events", ("add_events_to_memory",)),
    "memories_ingestions_admit": Operation(
        "POST", _USER + "/memories/ingestions", ("ingest_session",)
    ),
    "memory_erasure_epoch_get": Operation(
        "GET", _USER + "/memories/erasure-epoch", ("get_erasure_epoch",)
    ),
    "memory_consent_get": Operation("GET", _USER + "/memories/consent", ("get_consent",)),
    "memory_consent_put": Operation("PUT", _USER + "/memories/consent", ("set_consent",)),
    "memory_legal_hold_get": Operation("GET", _USER + "/memories/legal-hold", ("get_legal_hold",)),
    "memory_legal_hold_put": Operation(
        "PUT", _USER + "/memories/legal-hold", ("place_legal_hold",)
    ),
    "memory_legal_hold_delete": Operation(
        "DELETE", _USER + "/memories/legal-hold", ("release_legal_hold",)
    ),
    "memory_policy_get": Operation("GET", _APP + "/memory-policy", ("get_memory_policy",)),
    "memory_policy_put": Operation("PUT", _APP + "/memory-policy", ("set_memory_policy",)),
    # the ingestion outbox
    "outbox_job_get": Operation("GET", _APP + "/outbox/jobs/{job_id}", ("get_job",)),
    "outbox_job_cancel": Operation("POST", _APP + "/outbox/jobs/{job_id}/cancel", ("cancel_job",)),
    "outbox_stats": Operation("GET", _APP + "/outbox/stats", ("outbox_stats",)),
}
