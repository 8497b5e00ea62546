"""Session events into memory over REST (the synchronous path)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework.response import Response

from ctxadmin.api.paths import path_segment_error
from ctxadmin.api.schema import ref
from ctxadmin.errors import invalid, strict_object
from memory import ingest, new_memory
from memory.api.views import JSON, MemoryScopedView


class MemoryEventsView(MemoryScopedView):
    """``{"session_id"?, "events": [...], "custom_metadata"?}``: user and model text become
    memories; partial, control, empty and credential-bearing events are skipped; repeats are
    duplicates (keyed by session and event id, or by event id alone without a session)."""

    @extend_schema(
        operation_id="memories_add_events",
        request={JSON: ref("MemoryEventsRequest")},
        responses={200: ref("MemoryEventsResult")},
    )
    def post(self, request, app, user):
        body = request.data
        strict_object(body, {"session_id", "events", "custom_metadata"})
        session_id = body.get("session_id")
        if session_id is not None and (
            not isinstance(session_id, str) or path_segment_error("sid", session_id)
        ):
            raise invalid("session_id", "must be a session id or null")
        custom_metadata = body.get("custom_metadata")
        if custom_metadata is not None:
            custom_metadata = new_memory.parse_metadata(custom_metadata, "custom_metadata")
            reserved = sorted(set(custom_metadata) & ingest.EVENT_METADATA_KEYS)
            if reserved:
                raise invalid(
                    f"custom_metadata.{reserved[0]}", "is set from the event and cannot be given"
                )
        result = ingest.add_events(
            self.tenant, user, session_id, body.get("events"), custom_metadata
        )
        return Response(
            {
                "added": result.added,
                "duplicates": result.duplicates,
                "skipped": result.skipped,
                "skipped_by_reason": result.skipped_by_reason,
                "memory_ids": result.memory_ids,
            }
        )
