"""Building one model request from a session: validate everything, then read metadata,
select, read only the selected content, prune, assemble, fingerprint, account."""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from itertools import starmap

from django.conf import settings
from django.db import connection

from ctxadmin.canonical import canonical_json
from ctxadmin.errors import ServiceError
from memory import render
from memory import search as memory_search
from runner.inputs import ContextRequest, MemoryRetrieval
from sessions_app import history, telemetry
from sessions_app.compaction import requests
from sessions_app.context import envelope as env
from sessions_app.context.policy import ContextPolicy
from sessions_app.context.select import EventMeta, Overflow, select_history
from sessions_app.events import (
    COMPACTION,
    MODEL_CONTENT,
    TEXT,
    estimate_tokens,
)
from sessions_app.models import Session

logger = logging.getLogger("ctxadmin.context")


def _memory_items(session: Session, retrieval: MemoryRetrieval | None) -> list[dict]:
    """The memory slot: this user's hits for the query, rendered as untrusted reference
    blocks within the byte budgets. ``on_error: omit`` builds without memory when the search
    fails (the accounting says so); ``error`` fails the build."""
    if retrieval is None:
        return []
    try:
        hits = memory_search.search(session.app, session.user_id, retrieval.search)
    except ServiceError:
        if retrieval.on_error == "omit":
            telemetry.CONTEXT_BUILDS.labels("memory_omitted").inc()
            return []
        raise
    return render.render_hits(
        hits, max_hit_bytes=retrieval.max_hit_bytes, max_total_bytes=retrieval.max_total_bytes
    )


def _budget_error(
    code: str, message: str, measured: int, limit: int, bpt: int, which: str
) -> ServiceError:
    return ServiceError(
        code,
        message,
        status_code=422,
        details={
            "budget": which,
            "measured_bytes": measured,
            "limit_bytes": limit,
            "measured_tokens": estimate_tokens(measured, bpt),
            "limit_tokens": limit // bpt,
        },
    )


def build_context(session: Session, request: ContextRequest) -> BuiltContext:
    started = time.perf_counter()
    policy = request.policy
    parts = env.fixed_parts(
        instructions=request.instructions,
        generation_config=request.generation_config,
        tools=request.tools,
        memory=_memory_items(session, request.memory),
        current_input=request.current_input,
    )
    sizes = env.fixed_sizes(parts)
    fixed_total = sum(sizes.values())
    request_limit = policy.request_byte_limit(settings.CTXADMIN_MAX_CONTEXT_BYTES)
    if fixed_total > request_limit:
        telemetry.CONTEXT_BUILDS.labels("request_budget_exceeded").inc()
        raise _budget_error(
            "request_context_budget_exceeded",
            "The request without any history already exceeds the whole-request budget.",
            fixed_total,
            request_limit,
            policy.bytes_per_token,
            "request",
        )

    room = request_limit - fixed_total
    history_view = read_history(session.pk, policy)
    compaction_id = None
    try:
        selection = _select(history_view, policy, room)
    except Overflow as overflow:
        if policy.overflow != "compress":
            telemetry.CONTEXT_BUILDS.labels("budget_exceeded").inc()
            raise _overflow_error(overflow, policy, None) from None
        # Compress: compact now (bounded by the compaction policy's timeout), then select
        # again from the new checkpoint; what still does not fit is the usual error.
        checkpoint = requests.run_overflow(
            session,
            current_input_tokens=estimate_tokens(fixed_total, policy.bytes_per_token),
            history_limit_bytes=overflow.limit_bytes,
        )
        compaction_id = str(checkpoint.compaction_id)
        if checkpoint.status != "active":
            telemetry.CONTEXT_BUILDS.labels("compaction_failed").inc()
            raise ServiceError(
                "compaction_failed",
                "The history exceeds the budget and compacting it failed; nothing changed.",
                status_code=422,
                details={
                    "compaction_id": compaction_id,
                    "memory_hits": len(parts["memory"]),
                    "reason": checkpoint.reason,
                    "measured_bytes": overflow.measured_bytes,
                    "limit_bytes": overflow.limit_bytes,
                },
            ) from None
        history_view = read_history(session.pk, policy)
        try:
            selection = _select(history_view, policy, room)
        except Overflow as still:
            telemetry.CONTEXT_BUILDS.labels("budget_exceeded").inc()
            raise _overflow_error(still, policy, compaction_id) from None

    metas = history_view.metas
    history = _history(session, [metas[i] for i in selection.indices], history_view)
    envelope_json = env.assemble(parts, history)
    fingerprint = env.envelope_fingerprint(envelope_json)
    accounting = env.accounting(
        sizes, selection.history_bytes, len(history), policy.bytes_per_token
    )
    counts = {
        "input": selection.input_events,
        "selected": len(history),
        "dropped": selection.dropped,
        "dropped_by_filter": selection.dropped_by_filter,
        "dropped_by_budget": selection.dropped_by_budget,
        "dropped_by_window": selection.dropped_by_window,
        "without_content": selection.without_content,
        "hidden_by_compaction": history_view.hidden,
        "restored_calls": history_view.restored,
        "checkpoints": sum(1 for i in selection.indices if metas[i].checkpoint),
    }
    elapsed_ms = (time.perf_counter() - started) * 1000
    telemetry.record_build(
        session, counts, accounting, fingerprint, selection.truncated, elapsed_ms
    )
    return BuiltContext(
        envelope_json=envelope_json,
        accounting={
            "events": counts,
            **accounting,
            "bytes_per_token": policy.bytes_per_token,
            "truncated": selection.truncated,
            "compaction_id": compaction_id,
            "memory_hits": len(parts["memory"]),
            "build_ms": round(elapsed_ms, 3),
        },
        fingerprint=fingerprint,
    )


@dataclass(frozen=True)
class BuiltContext:
    envelope_json: bytes  # canonical
    accounting: dict
    fingerprint: str

    def response_json(self) -> bytes:
        """The response body: the envelope goes out as the bytes that were fingerprinted."""
        return (
            b'{"envelope":'
            + self.envelope_json
            + b',"accounting":'
            + canonical_json(self.accounting)
            + b',"context_fingerprint":"'
            + self.fingerprint.encode("ascii")
            + b'"}'
        )


@dataclass(frozen=True)
class HistoryView:
    """What selection reads: event metadata outside the visible checkpoints, with each
    checkpoint as one entry where its range begins, and calls restored for responses whose
    call was compacted."""

    metas: list[EventMeta]
    checkpoints: dict[float, list[str]]  # entry seq -> its history items (canonical JSON)
    hidden: int  # events hidden by compaction
    restored: int


def read_history(session_pk: int, policy: ContextPolicy) -> HistoryView:
    visible = history.visible_checkpoints(session_pk)
    ranges = [(v.view.first_seq, v.view.last_seq) for v in visible]
    metas = event_metas(session_pk, policy, ranges)
    if not visible:
        return HistoryView(metas, {}, 0, 0)
    restored = _restored_calls(session_pk, policy, metas, ranges)
    checkpoints: dict[float, list[str]] = {}
    for v in visible:
        position = v.view.first_seq - 0.5
        items = [canonical_json(item).decode("utf-8") for item in json.loads(v.items_json)]
        checkpoints[position] = items
        metas.append(
            EventMeta(
                seq=position,
                kinds=TEXT | MODEL_CONTENT,
                call_ids=None,
                response_ids=None,
                context_bytes=v.items_bytes + env.FRAMING_PER_ITEM_BYTES * (v.item_count - 1),
                checkpoint=True,
            )
        )
    metas.extend(restored)
    metas.sort(key=lambda meta: meta.seq)
    return HistoryView(
        metas, checkpoints, _hidden_count(session_pk, ranges) - len(restored), len(restored)
    )


def _select(view: HistoryView, policy: ContextPolicy, room: int):
    return select_history(
        view.metas, policy, request_room_bytes=room, framing_per_item=env.FRAMING_PER_ITEM_BYTES
    )


def _overflow_error(overflow: Overflow, policy: ContextPolicy, compaction_id: str | None):
    error = _budget_error(
        "context_budget_exceeded",
        f"The selected history exceeds the {overflow.limit_name} budget.",
        overflow.measured_bytes,
        overflow.limit_bytes,
        policy.bytes_per_token,
        overflow.limit_name,
    )
    if compaction_id is not None:
        error.details["compaction_id"] = compaction_id
    return error


def _meta_columns(policy: ContextPolicy) -> list[str]:
    columns = ["seq", "kinds", "call_ids", "response_ids", "context_bytes"]
    if policy.filters_on_identity or policy.filters_on_time:
        columns += ["author", "invocation_id"]
    if policy.filters_on_time:
        columns.append("date_part('epoch', timestamp)")
    return columns


def event_metas(
    session_pk: int, policy: ContextPolicy, hidden: list[tuple[int, int]] | None = None
) -> list[EventMeta]:
    """Every visible event's selection metadata, never content. Authors, invocation ids and
    times are read only when the policy filters on them: per-value decoding is most of the
    cost. Compaction events and events inside ``hidden`` ranges are left out."""
    condition, params = history.uncovered_sql(hidden or [])
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {', '.join(_meta_columns(policy))} FROM sessions_app_event "  # noqa: S608
            f"WHERE session_id = %s AND kinds & %s = 0 AND {condition} ORDER BY seq",
            [session_pk, COMPACTION, *params],
        )
        return list(starmap(EventMeta, cursor.fetchall()))


def _restored_calls(
    session_pk: int, policy: ContextPolicy, metas: list[EventMeta], ranges: list[tuple[int, int]]
) -> list[EventMeta]:
    """A response whose call was compacted away gets its call back (a model must never see
    a response without its call)."""
    calls = {call for meta in metas for call in meta.call_ids or ()}
    orphans = sorted(
        {answer for meta in metas for answer in meta.response_ids or () if answer not in calls}
    )
    if not orphans:
        return []
    condition, params = history.uncovered_sql(ranges)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {', '.join(_meta_columns(policy))} FROM sessions_app_event "  # noqa: S608
            f"WHERE session_id = %s AND call_ids && %s::varchar[] AND NOT {condition} "
            "ORDER BY seq",
            [session_pk, orphans, *params],
        )
        return list(starmap(EventMeta, cursor.fetchall()))


def _hidden_count(session_pk: int, ranges: list[tuple[int, int]]) -> int:
    condition, params = history.uncovered_sql(ranges)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM sessions_app_event "  # noqa: S608
            f"WHERE session_id = %s AND kinds & %s = 0 AND NOT {condition}",
            [session_pk, COMPACTION, *params],
        )
        return cursor.fetchone()[0]


def _history(session: Session, selected: list[EventMeta], view: HistoryView) -> list[str]:
    """The selected entries' history items: checkpoints' from the view, events' from their
    precomputed items (a range scan when dense, by key when sparse)."""
    seqs = [meta.seq for meta in selected if not meta.checkpoint]
    items: dict[int, str] = {}
    if seqs:
        with connection.cursor() as cursor:
            if len(seqs) * 2 >= seqs[-1] - seqs[0] + 1:
                cursor.execute(
                    "SELECT seq, context_json FROM sessions_app_event "
                    "WHERE session_id = %s AND seq BETWEEN %s AND %s",
                    [session.pk, seqs[0], seqs[-1]],
                )
            else:
                cursor.execute(
                    "SELECT seq, context_json FROM sessions_app_event "
                    "WHERE session_id = %s AND seq = ANY(%s)",
                    [session.pk, seqs],
                )
            wanted = set(seqs)
            items = {seq: item for seq, item in cursor.fetchall() if seq in wanted}
    history: list[str] = []
    for meta in selected:
        if meta.checkpoint:
            history.extend(view.checkpoints[meta.seq])
        else:
            history.append(items[meta.seq])
    return history
