"""Content-free diagnostics of sessions, context, checkpoints, prefix caches, memory and
the ingestion outbox, shared by the ``/dev/v1/`` API and the management commands.

Everything returned is ids (as the client gave them), counts, bytes, token estimates,
fingerprints, states and times: never event text, state values, summaries, memory text,
prefixes, provider resource names or credentials. Inputs are validated here, so the API and
the CLI refuse the same things with the same codes.
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.conf import settings

from caching import registry
from caching import selectors as caching
from caching.invalidate import invalidate_named
from ctxadmin.api.paths import path_segment_error
from ctxadmin.canonical import canonical_size
from ctxadmin.errors import ServiceError, invalid, not_found
from ctxadmin.models import App
from ctxadmin.pruning import echoed
from ctxadmin.timestamps import iso_timestamp
from memory import erasure
from memory import inputs as memory_inputs
from memory import search as memory_searches
from memory import selectors as memory_selectors
from memory.outbox import operations
from runner.context import build_context
from runner.inputs import ContextRequest
from sessions_app import selectors as sessions
from sessions_app.context.policy import ContextPolicy

if TYPE_CHECKING:
    from sessions_app.models import Checkpoint, Session

logger = logging.getLogger("console.diagnostics")

#: The diagnostic policy's history cap when none is given (never above the deployment's
#: ``CTXADMIN_MAX_CONTEXT_BYTES``).
DEFAULT_MAX_BYTES = 1024 * 1024
MAX_INPUT_EVENTS = 1_000_000
MAX_BYTES_PER_TOKEN = 16
CONTEXT_PARAMS = ("max_bytes", "max_tokens", "max_input_events", "bytes_per_token")
#: Scopes of one (app, user, model) listed by the lifecycle report, newest first.
MAX_LIFECYCLE_SCOPES = 50
# The model names a cache scope accepts (as ``caching.keys`` parses them).
_MODEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:-]{0,127}")
_HEX64 = re.compile(r"[0-9a-f]{64}")
# The diagnostic build's current input: empty text, so the envelope is the history alone.
_PLACEHOLDER_INPUT = {"role": "user", "parts": [{"text": ""}]}
CONFIRM_KEYS = ("app_name", "user_id", "session_id", "model", "scope_fingerprint")


def _time(value) -> str | None:
    return iso_timestamp(value) if value is not None else None


def _parameter_error(name: str, message: str) -> ServiceError:
    return ServiceError("invalid_parameter", f"{name} {message}", details={"parameter": name})


# ----------------------------------------------------------------------------- sessions


def session_or_404(app: App, user_id: str, session_id: str) -> Session:
    session = sessions.session_or_none(app, user_id, session_id)
    if session is None:
        raise not_found()
    return session


def check_identifiers(**segments: str) -> None:
    """The CLI's arguments, checked as the API checks its path segments."""
    for name, value in segments.items():
        problem = path_segment_error(name, value)
        if problem:
            raise ServiceError("invalid_path_parameter", problem, details={"parameter": name})


# ----------------------------------------------------------------------------- context


def context_policy(
    *,
    max_bytes: int | None = None,
    max_tokens: int | None = None,
    max_input_events: int | None = None,
    bytes_per_token: int | None = None,
) -> ContextPolicy:
    """The fixed diagnostic policy: no filters, everything included, the newest units that
    fit ``max_bytes`` (and ``max_tokens``) kept (``truncate``); it never compacts."""
    ceiling = settings.CTXADMIN_MAX_CONTEXT_BYTES
    bounds = {
        "max_bytes": (max_bytes, ceiling),
        "max_tokens": (max_tokens, ceiling),
        "max_input_events": (max_input_events, MAX_INPUT_EVENTS),
        "bytes_per_token": (bytes_per_token, MAX_BYTES_PER_TOKEN),
    }
    for name, (value, high) in bounds.items():
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= high
        ):
            raise _parameter_error(name, f"must be an integer from 1 to {high}")
    return ContextPolicy(
        max_bytes=max_bytes if max_bytes is not None else min(DEFAULT_MAX_BYTES, ceiling),
        max_tokens=max_tokens,
        max_input_events=max_input_events,
        bytes_per_token=bytes_per_token or 4,
        overflow="truncate",
    )


def context_policy_from_query(query) -> ContextPolicy:
    """``context_policy`` from query parameters: each at most once, decimal digits only."""
    values: dict[str, int] = {}
    for name in CONTEXT_PARAMS:
        given = query.getlist(name)
        if not given:
            continue
        if len(given) > 1:
            raise _parameter_error(name, "must be given once")
        raw = given[0]
        if not (raw.isascii() and raw.isdigit()) or len(raw) > 10:
            raise _parameter_error(name, "must be a positive integer")
        values[name] = int(raw)
    return context_policy(**values)


def _policy_json(policy: ContextPolicy) -> dict:
    return {
        "max_bytes": policy.max_bytes,
        "max_tokens": policy.max_tokens,
        "max_input_events": policy.max_input_events,
        "bytes_per_token": policy.bytes_per_token,
        "overflow": policy.overflow,
    }


def _checkpoint_json(row: Checkpoint | None) -> dict | None:
    if row is None:
        return None
    return {
        "checkpoint_id": str(row.compaction_id),
        "status": row.status,
        "origin": row.origin,
        "trigger": row.trigger or None,
        "representation": row.representation or None,
        "source_fingerprint": row.source_fingerprint or None,
        "first_seq": row.first_seq,
        "last_seq": row.last_seq,
        "events_covered": len(row.source_event_ids),
        "tokens_before": row.tokens_before,
        "tokens_after": row.tokens_after,
        "created_at": _time(row.created_at),
        "finished_at": _time(row.finished_at),
    }


def _identifiers(session: Session) -> dict:
    return {
        "app": session.app.name,
        "user_id": session.user_id,
        "session_id": session.session_id,
    }


def context_report(session: Session, policy: ContextPolicy) -> dict:
    """The diagnostic policy applied to the session: counts, bytes and token estimates, the
    active checkpoint's coverage and the fingerprint of the diagnostic envelope."""
    started = time.perf_counter()
    built = build_context(
        session,
        ContextRequest(
            current_input=_PLACEHOLDER_INPUT,
            instructions=None,
            generation_config=None,
            tools=None,
            policy=policy,
        ),
    )
    accounting = built.accounting
    counts = accounting["events"]
    active = sessions.active_checkpoint(session)
    return {
        **_identifiers(session),
        "session_revision": session.revision,
        "last_seq": session.last_seq,
        "policy": _policy_json(policy),
        "events": {
            "stored": session.event_count,
            "considered": counts["input"],
            "selected": counts["selected"],
            "dropped": counts["dropped"],
            "dropped_by_reason": {
                "filter": counts["dropped_by_filter"],
                "budget": counts["dropped_by_budget"],
                "window": counts["dropped_by_window"],
            },
            "without_content": counts["without_content"],
            "hidden_by_compaction": counts["hidden_by_compaction"],
            "restored_calls": counts["restored_calls"],
            "checkpoints": counts["checkpoints"],
        },
        "bytes": accounting["bytes"],
        "tokens": accounting["tokens"],
        "truncated": accounting["truncated"],
        "compressed": counts["checkpoints"] > 0,
        "checkpoint": _checkpoint_json(active),
        "context_fingerprint": built.fingerprint,
        "timings": {
            "build_ms": accounting["build_ms"],
            "total_ms": round((time.perf_counter() - started) * 1000, 3),
        },
    }


# ----------------------------------------------------------------------------- lifecycle


def parse_model(value: Any, name: str = "model") -> str:
    if not isinstance(value, str) or not _MODEL.fullmatch(value):
        raise _parameter_error(name, "must be 1-128 characters from A-Z a-z 0-9 . _ / : -")
    return value.removeprefix("models/")


def model_from_query(query) -> str | None:
    given = query.getlist("model")
    if not given:
        return None
    if len(given) > 1:
        raise _parameter_error("model", "must be given once")
    return parse_model(given[0])


def _scope_counts(app: App, fingerprint: str) -> dict:
    status = registry.scope_status(app, fingerprint)
    return {
        "scope_fingerprint": status["scope_fingerprint"],
        "provider": status["provider"],
        "policy_fingerprint": status["policy_fingerprint"],
        "generation": status["generation"],
        "entries": status["entries"],
        "in_flight": status["in_flight"],
        "waiters": status["waiters"],
        "deleting": status["deleting"],
        "failed": status["failed"],
        "earliest_expiry": _time(status["earliest_expiry"]),
        "latest_expiry": _time(status["latest_expiry"]),
        "created_at": _time(status["created_at"]),
        "invalidated_at": _time(status["invalidated_at"]),
    }


def cache_report(app: App, user_id: str, model: str) -> dict:
    """Every cache scope of (app, user, model), whatever its provider and policy, newest
    first; ``scope_fingerprint`` names the newest (the only one, usually)."""
    total, fingerprints = caching.scope_fingerprints(app, user_id, model, MAX_LIFECYCLE_SCOPES)
    scopes = [_scope_counts(app, fingerprint) for fingerprint in fingerprints]
    return {
        "model": model,
        "scope_fingerprint": scopes[0]["scope_fingerprint"] if scopes else None,
        "scopes_total": total,
        "entries": sum(s["entries"] for s in scopes),
        "in_flight": sum(s["in_flight"] for s in scopes),
        "waiters": sum(s["waiters"] for s in scopes),
        "scopes": scopes,
    }


def lifecycle_report(session: Session, model: str | None) -> dict:
    """The session's active checkpoint, its compactions in flight, and the prefix-cache
    scopes of (app, user, ``model``) (``cache`` is null without a model)."""
    in_flight = sessions.compactions_in_flight(session)
    return {
        **_identifiers(session),
        "model": model,
        "session_revision": session.revision,
        "last_seq": session.last_seq,
        "checkpoint": _checkpoint_json(sessions.active_checkpoint(session)),
        "compactions_in_flight": in_flight,
        "cache": cache_report(session.app, session.user_id, model) if model else None,
    }


# ----------------------------------------------------------------------------- invalidate


@dataclass(frozen=True)
class Confirmation:
    app_name: str
    user_id: str
    session_id: str
    model: str
    scope_fingerprint: str


def parse_confirmation(body: Any) -> Confirmation:
    """Exactly ``{app_name, user_id, session_id, model, scope_fingerprint}``, each bounded:
    anything else is a 400 before anything is compared."""
    if not isinstance(body, dict):
        raise invalid("body", "must be a JSON object")
    unknown = sorted(set(body) - set(CONFIRM_KEYS))
    if unknown:
        raise invalid(echoed(unknown[0]), "unknown field")
    for name in CONFIRM_KEYS:
        if name not in body:
            raise invalid(name, "is required")
    limits = {"app_name": 63, "user_id": 128, "session_id": 128, "model": 128}
    for name, limit in limits.items():
        value = body[name]
        if not isinstance(value, str) or not 1 <= len(value) <= limit:
            raise invalid(name, f"must be a string of 1 to {limit} characters")
    fp = body["scope_fingerprint"]
    if not isinstance(fp, str) or not _HEX64.fullmatch(fp):
        raise invalid("scope_fingerprint", "must be 64 lowercase hex digits")
    return Confirmation(**{name: body[name] for name in CONFIRM_KEYS})


def _mismatch(field: str) -> ServiceError:
    return ServiceError(
        "confirmation_mismatch",
        f"The confirmation's {field} does not match; nothing was invalidated.",
        status_code=409,
        details={"field": field},
    )


def invalidate_confirmed(session: Session, confirmation: Confirmation, actor: str) -> dict:
    """Invalidate the exact cache scope the confirmation names: every entry and create in
    flight of it, across sessions, TTLs and prefixes. The confirmation must name this
    session's app, user and session, and a current scope of (app, user, model); any
    mismatch is 409 ``confirmation_mismatch`` and changes nothing."""
    app = session.app
    for field, expected in (
        ("app_name", app.name),
        ("user_id", session.user_id),
        ("session_id", session.session_id),
    ):
        if getattr(confirmation, field) != expected:
            raise _mismatch(field)
    model = confirmation.model.removeprefix("models/")
    done = invalidate_named(app, session.user_id, model, confirmation.scope_fingerprint)
    if done.mismatch is not None:
        raise _mismatch(done.mismatch)
    logger.info(
        "diagnostics_cache_invalidate",
        extra={
            "app": app.name,
            "scope": confirmation.scope_fingerprint[:16],
            "actor": actor,
            "entries": done.result["entries_invalidated"],
        },
    )
    return {
        **_identifiers(session),
        "model": done.model,
        "provider": done.provider,
        **done.result,
    }


# ----------------------------------------------------------------------------- memory


def memory_search(app: App, user_id: str, body: Any) -> dict:
    """A search in one exact (app, user) scope, projected to ids, scores, times and sizes.
    Every hit is checked against the scope in the database before it is reported."""
    request = memory_inputs.parse_search(body)
    started = time.perf_counter()
    hits = memory_searches.search(app, user_id, request)
    ids = [hit["id"] for hit in hits]
    in_scope: dict[str, tuple] = {}
    if ids:
        in_scope = memory_selectors.entry_sizes_in_scope(app, user_id, ids)
    projected = []
    for hit in hits:
        row = in_scope.get(hit["id"])
        if row is None:
            # Deleted meanwhile, or (never expected) outside the scope: not reported.
            logger.warning("diagnostics_memory_hit_dropped", extra={"app": app.pk})
            continue
        content_bytes, created_at, source_ts = row
        projected.append(
            {
                "id": hit["id"],
                "app": app.name,
                "user_id": user_id,
                "score": hit["score"],
                "score_type": hit["score_type"],
                "content_bytes": content_bytes,
                "metadata_bytes": canonical_size(hit["metadata"] or {}),
                "source_timestamp": _time(source_ts),
                "created_at": _time(created_at),
            }
        )
    return {
        "app": app.name,
        "user_id": user_id,
        "mode": request.mode,
        "limit": request.limit,
        "count": len(projected),
        "hits": projected,
        "search_ms": round((time.perf_counter() - started) * 1000, 3),
    }


def erase_user(app: App, user_id: str, actor: str) -> dict:
    """The user's whole memory (``memory.erasure.erase_user``): the erasure receipt."""
    receipt = erasure.erase_user(app, user_id, actor)
    logger.info(
        "diagnostics_erase_user",
        extra={"app": app.name, "receipt": receipt["receipt_id"], "actor": actor},
    )
    return receipt


# ----------------------------------------------------------------------------- outbox


def outbox_stats(app: App) -> dict:
    return {"app": app.name, **operations.stats(app)}


def outbox_job(app: App, job_id: str) -> dict:
    return {"app": app.name, **operations.job_json(operations.get_job(app, job_id))}
