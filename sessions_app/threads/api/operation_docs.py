"""The graph thread operations' one-line summaries in the API documentation."""

from __future__ import annotations

from ctxadmin.api.schema import operation_docs

DOCS: dict[str, dict] = {
    "checkpoints_list": {"summary": "List the checkpoints of every graph thread of the app"},
    "thread_delete": {"summary": "Delete a graph thread with its checkpoints and writes"},
    "thread_checkpoints_list": {"summary": "List a graph thread's checkpoints"},
    "thread_checkpoints_put": {"summary": "Store a checkpoint of a graph thread"},
    "thread_checkpoint_get": {"summary": "One checkpoint of a graph thread"},
    "thread_checkpoint_writes_put": {"summary": "Store a task's pending writes on a checkpoint"},
}

add_operation_docs = operation_docs(DOCS)
