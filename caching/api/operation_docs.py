"""The cache operations' one-line summaries in the API documentation."""

from __future__ import annotations

from ctxadmin.api.schema import operation_docs

DOCS = {
    "cache_acquire": {"summary": "Lease the provider cache of a prefix (create, hit or bypass)"},
    "cache_invalidate": {"summary": "Invalidate one cache scope"},
    "cache_scope_status": {"summary": "A cache scope's content-free status"},
}

add_operation_docs = operation_docs(DOCS)
