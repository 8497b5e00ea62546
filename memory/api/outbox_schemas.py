"""OpenAPI component schemas of the ingestion outbox (registered by a drf-spectacular hook
after ``memory.api.schemas``'s, whose parts they share)."""

from __future__ import annotations

from ctxadmin.api.schema import ref
from memory.api.schemas import (
    _FINGERPRINT,
    _NULLABLE_STRING,
    _NULLABLE_TIME,
    _SESSION_ID,
    _strict,
)
from memory.models import OutboxJob
from memory.outbox.admission import MAX_ATTEMPTS_LIMIT, MAX_JOB_EVENTS
from memory.outbox.jobs import EXTRACTION_TOTALS

OUTBOX_COMPONENTS: dict = {}
_COUNT = {"type": "integer", "minimum": 0}
_PHASE = {"enum": [phase for phase, _label in OutboxJob.PHASES]}
OUTBOX_COMPONENTS["OutboxAdmission"] = _strict(
    {
        "session_id": _SESSION_ID,
        "after_seq": {
            "type": "integer",
            "minimum": 0,
            "description": "ingest the events after this seq (default 0: from the first)",
        },
        "max_attempts": {"type": "integer", "minimum": 1, "maximum": MAX_ATTEMPTS_LIMIT},
        "extractor": {
            "allOf": [ref("Extractor")],
            "description": "this job's extractor (default: the app's memory policy's)",
        },
    },
    ["session_id"],
)
OUTBOX_COMPONENTS["OutboxAdmitted"] = _strict(
    {
        "job_id": {"type": "string", "format": "uuid"},
        "status_url": {"type": "string", "format": "uri"},
        "deduplicated": {"type": "boolean"},
        "phase": _PHASE,
        "events": {"type": "integer", "minimum": 1, "maximum": MAX_JOB_EVENTS},
        "first_seq": {"type": "integer"},
        "last_seq": {"type": "integer"},
        "erasure_epoch": _COUNT,
        "more": {
            "type": "boolean",
            "description": "more events follow than one job takes (5,000 events, 8 MiB): "
            "admit again from next_after_seq",
        },
        "next_after_seq": {"type": "integer", "nullable": True},
    },
    [
        "job_id",
        "status_url",
        "deduplicated",
        "phase",
        "events",
        "first_seq",
        "last_seq",
        "erasure_epoch",
        "more",
        "next_after_seq",
    ],
)
_OUTBOX_JOB_FIELDS = {
    "job_id": {"type": "string", "format": "uuid"},
    "phase": _PHASE,
    "session_id": {**_NULLABLE_STRING, "description": "null once the user was erased"},
    "scope_fingerprint": _FINGERPRINT,
    "erasure_epoch": _COUNT,
    "events": _COUNT,
    "first_seq": {"type": "integer"},
    "last_seq": {"type": "integer"},
    "cursor": {**_COUNT, "description": "events written or skipped so far"},
    "batches": _COUNT,
    "added": _COUNT,
    "duplicates": _COUNT,
    "skipped": _COUNT,
    "skipped_by_reason": {"type": "object", "additionalProperties": {"type": "integer"}},
    "redacted": {**_COUNT, "description": "events whose text had credentials redacted"},
    "adapter": {
        "enum": ["session_events.v1", "extraction.v1"],
        "description": "session_events.v1 stores each turn as said; extraction.v1 extracts",
    },
    "extraction": {
        "type": "object",
        "nullable": True,
        "additionalProperties": False,
        "description": "an extraction job's extractor kind and totals (null otherwise)",
        "properties": {
            "extractor": {"type": "string"},
            **{name: _COUNT for name in EXTRACTION_TOTALS},
        },
        "required": ["extractor", *EXTRACTION_TOTALS],
    },
    "attempts": _COUNT,
    "max_attempts": _COUNT,
    "next_attempt_at": _NULLABLE_TIME,
    "lease": {
        "type": "object",
        "nullable": True,
        "additionalProperties": False,
        "properties": {
            "expires_at": {"type": "string", "format": "date-time"},
            "expired": {"type": "boolean"},
        },
        "required": ["expires_at", "expired"],
    },
    "error": {
        "type": "object",
        "nullable": True,
        "additionalProperties": False,
        "properties": {"code": {"type": "string"}, "message": {"type": "string"}},
        "required": ["code", "message"],
    },
    "created_at": {"type": "string", "format": "date-time"},
    "updated_at": {"type": "string", "format": "date-time"},
    "started_at": _NULLABLE_TIME,
    "finished_at": _NULLABLE_TIME,
}
OUTBOX_COMPONENTS["OutboxJob"] = _strict(_OUTBOX_JOB_FIELDS, list(_OUTBOX_JOB_FIELDS))
OUTBOX_COMPONENTS["OutboxStats"] = _strict(
    {
        "by_phase": _strict({name: _COUNT for name in _PHASE["enum"]}, list(_PHASE["enum"])),
        "active": _COUNT,
        "oldest_due_age_seconds": {
            "type": "number",
            "nullable": True,
            "description": "how long the app's longest-waiting due job has waited to be claimed",
        },
        "expired_leases": _COUNT,
        "active_bytes": _COUNT,
        "extraction": _strict(
            {
                "active_jobs": _COUNT,
                "deferred_for_budget": {
                    **_COUNT,
                    "description": "active extraction jobs waiting for the next day's budget",
                },
                "runs_today": {**_COUNT, "description": "batches an extractor answered (UTC)"},
                "refused_today": _COUNT,
                "tokens_today": _COUNT,
                "tokens_per_day": {
                    **_COUNT,
                    "description": "CTXADMIN_EXTRACTION_TOKENS_PER_APP_DAY",
                },
            },
            [
                "active_jobs",
                "deferred_for_budget",
                "runs_today",
                "refused_today",
                "tokens_today",
                "tokens_per_day",
            ],
        ),
    },
    [
        "by_phase",
        "active",
        "oldest_due_age_seconds",
        "expired_leases",
        "active_bytes",
        "extraction",
    ],
)


def add_components(result, generator, request, public):
    """drf-spectacular post-processing hook: register the components above."""
    result.setdefault("components", {}).setdefault("schemas", {}).update(OUTBOX_COMPONENTS)
    return result
