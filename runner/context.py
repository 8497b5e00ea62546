"""Building one model request from a session: validate everything, then read metadata,
select, read only the selected content, prune, assemble, fingerprint, account."""

from __future__ import annotations

import html
import json
import logging
import time
from dataclasses import dataclass

from django.conf import settings

from ctxadmin.canonical import canonical_json
from ctxadmin.errors import ServiceError
from memory import neighbours, render, resolve, slot
from memory import profile as memory_profile
from memory import search as memory_search
from runner.inputs import ContextRequest, MemoryRetrieval
from sessions_app import history, telemetry
from sessions_app.compaction import requests
from sessions_app.context import envelope as env
from sessions_app.context import recall
from sessions_app.context.policy import ContextPolicy
from sessions_app.context.select import EventMeta, Overflow, select_history
from sessions_app.events import (
    estimate_tokens,
)
from sessions_app.models import Session

logger = logging.getLogger("ctxadmin.context")

# Under truncate, when memory is packed into the request budget, the share of the room
# (what the budget leaves after the instructions, tools and current input) that recent
# history gets first; memory fills the rest, and history takes back what memory leaves.
HISTORY_SHARE_PERCENT = 10
# The best hits packed with their neighbours (the same session's turns just before and after
# each): an answer is often the turn after the question that finds it.
NEIGHBOURED_HITS = 10


def _memory_hits(session: Session, retrieval: MemoryRetrieval | None, room: int) -> list[dict]:
    """This user's hits for the memory query, best first, at most as many as the slot could
    hold when the caller gave no ``limit`` (``room``: what the request budget leaves, or
    ``max_total_bytes``). ``on_error: omit`` builds without memory when the search fails
    (the accounting says so); ``error`` fails the build."""
    if retrieval is None:
        return []
    try:
        hits = memory_search.search(session.app, session.user_id, retrieval.search_in(room))
    except ServiceError:
        if retrieval.on_error == "omit":
            telemetry.CONTEXT_BUILDS.labels("memory_omitted").inc()
            return []
        raise
    return resolve.resolve(slot.with_versions(session.app, session.user_id, hits))


def _profile(session: Session, request: ContextRequest) -> tuple[list | None, dict | None]:
    """The profile part (one untrusted item holding the block, or none when no field is
    found) and its content-free accounting; (None, None) when the request asks for none."""
    if request.profile is None:
        return None, None
    profile = memory_profile.user_profile(session.app, session.user_id, request.profile)
    ids = [field["memory_id"] for field in profile["fields"]]
    part = (
        [
            {
                "memory_ids": ids,
                "untrusted": True,
                "content": {"role": "user", "parts": [{"text": profile["text"]}]},
            }
        ]
        if ids
        else []
    )
    summary = {
        "fields": len(ids),
        "bytes": profile["bytes"],
        "sha256": profile["sha256"],
        "truncated": profile["truncated"],
    }
    logger.info(
        "context_profile",
        extra={"app_id": session.app_id, "session_pk": session.pk, **summary},
    )
    return part, summary


def _packs(retrieval: MemoryRetrieval | None) -> bool:
    """Whether the memory slot is packed into what the request budget leaves (no
    ``max_total_bytes``) rather than filled to a byte cap the caller chose."""
    return retrieval is not None and retrieval.max_total_bytes is None


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
    retrieval = request.memory
    packing = _packs(retrieval)
    profile_part, profile_summary = _profile(session, request)

    def fixed(memory: list) -> dict:
        parts = env.fixed_parts(
            instructions=request.instructions,
            generation_config=request.generation_config,
            tools=request.tools,
            memory=memory,
            current_input=request.current_input,
        )
        if profile_part is not None:
            parts["profile"] = profile_part
        return parts

    parts = fixed([])
    request_limit = policy.request_byte_limit(settings.CTXADMIN_MAX_CONTEXT_BYTES)
    if retrieval is not None and not packing:  # capped: the hits fill max_total_bytes
        hits = _memory_hits(session, retrieval, retrieval.max_total_bytes)
        parts = fixed(
            render.render_hits(
                hits,
                max_hit_bytes=retrieval.max_hit_bytes,
                max_total_bytes=retrieval.max_total_bytes,
            )
        )
    else:  # packed: the hits fill what the rest of the request leaves
        hits = _memory_hits(
            session, retrieval, request_limit - sum(env.fixed_sizes(parts).values())
        )
    sizes = env.fixed_sizes(parts)
    fixed_total = sum(sizes.values())
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
    history_view = history.read_history(session.pk, policy)
    compaction_id = None
    # Packing under truncate: recent history first, up to its share of the room; memory then
    # fills what remains, and history takes back what memory leaves.
    first_room = (
        max(0, room * HISTORY_SHARE_PERCENT // 100)
        if packing and hits and policy.overflow == "truncate"
        else room
    )
    try:
        selection = _select(history_view, policy, first_room)
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
                    "memory_hits": render.hit_count(parts["memory"]),
                    "reason": checkpoint.reason,
                    "measured_bytes": overflow.measured_bytes,
                    "limit_bytes": overflow.limit_bytes,
                },
            ) from None
        history_view = history.read_history(session.pk, policy)
        try:
            selection = _select(history_view, policy, room)
        except Overflow as still:
            telemetry.CONTEXT_BUILDS.labels("budget_exceeded").inc()
            raise _overflow_error(still, policy, compaction_id) from None

    metas = history_view.metas
    items = _history(session, [metas[i] for i in selection.indices], history_view)
    if packing and hits:
        selection, items, parts["memory"], sizes["memory"] = _pack(
            session, history_view, policy, room, hits, selection, items, retrieval
        )
    history_bytes = selection.history_bytes
    used = history_bytes + env.FRAMING_PER_ITEM_BYTES * len(items)
    left = room - used - (sizes["memory"] if packing else 0)
    history_limit = policy.history_byte_limit()
    if history_limit is not None:
        left = min(left, history_limit - history_bytes + env.FRAMING_PER_ITEM_BYTES)
    items, recalled_bytes, recalled = _recall(
        session, request, history_view, selection.indices, items, parts["memory"], left
    )
    history_bytes += recalled_bytes
    envelope_json = env.assemble(parts, items)
    fingerprint = env.envelope_fingerprint(envelope_json)
    accounting = env.accounting(sizes, history_bytes, len(items), policy.bytes_per_token)
    counts = {
        "input": selection.input_events,
        "selected": len(items),
        "dropped": selection.dropped,
        "dropped_by_filter": selection.dropped_by_filter,
        "dropped_by_budget": selection.dropped_by_budget,
        "dropped_by_window": selection.dropped_by_window,
        "without_content": selection.without_content,
        "hidden_by_compaction": history_view.hidden,
        "restored_calls": history_view.restored,
        "checkpoints": sum(1 for i in selection.indices if metas[i].checkpoint),
        "recalled": recalled,
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
            "memory_hits": render.hit_count(parts["memory"]),
            **({"profile": profile_summary} if profile_summary is not None else {}),
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


def _select(view: history.HistoryView, policy: ContextPolicy, room: int):
    return select_history(
        view.metas, policy, request_room_bytes=room, framing_per_item=env.FRAMING_PER_ITEM_BYTES
    )


def _pack(
    session: Session,
    view: history.HistoryView,
    policy: ContextPolicy,
    room: int,
    hits: list[dict],
    selection,
    items: list[str],
    retrieval: MemoryRetrieval,
):
    """The memory slot packed into what the selected history leaves of ``room``, without the
    hits whose text that history holds; then, under truncate, the history selected again in
    what memory leaves (it only grows), and the slot packed again against it (it only
    shrinks or keeps its size). Returns the selection, its items, the slot and its bytes."""

    search = retrieval.search
    around = neighbours.neighbours(
        session.app,
        session.user_id,
        [hit["id"] for hit in hits[:NEIGHBOURED_HITS]],
        search.filter_sql,
        search.filter_params,
    )

    def packed(history_items: list[str], slot_room: int) -> tuple[list[dict], int]:
        memory, size = render.pack_hits(
            hits,
            max_hit_bytes=retrieval.max_hit_bytes,
            room_bytes=slot_room,
            history_json=",".join(history_items),
            neighbours=around,
        )
        return memory, size

    used = selection.history_bytes + env.FRAMING_PER_ITEM_BYTES * len(items)
    memory, memory_bytes = packed(items, room - used)
    if policy.overflow == "truncate":
        again = _select(view, policy, room - memory_bytes)
        if again.indices != selection.indices:
            selection = again
            items = _history(session, [view.metas[i] for i in again.indices], view)
            memory, memory_bytes = packed(items, memory_bytes)
    return selection, items, memory, memory_bytes


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


def _recall(
    session: Session,
    request: ContextRequest,
    view: history.HistoryView,
    indices: list[int],
    items: list[str],
    memory: list,
    left: int,
) -> tuple[list[str], int, int]:
    """The selected checkpoints' hidden events (while stored: ``audit`` retention) that best
    match the current input, as one excerpts item right after the newest selected
    checkpoint's items, in what ``left`` allows (its framing counted). Returns the items,
    the excerpts item's bytes and how many events it restores."""
    covered = view.covered or {}
    room = left - env.FRAMING_PER_ITEM_BYTES
    selected = [view.metas[i].seq for i in indices if view.metas[i].seq in covered]
    query = "\n".join(
        part["text"]
        for part in request.current_input.get("parts") or ()
        if isinstance(part.get("text"), str)
    )
    if not selected or room <= 0 or not query.strip():
        return items, 0, 0
    ranges = [covered[seq] for seq in selected]
    rows = history.hidden_texts(session.pk, ranges, recall.MAX_CANDIDATES)
    ranked = recall.rank(query, [recall.Hidden(*row) for row in rows])
    if not ranked:
        return items, 0, 0
    held_text = "\n".join(
        part.get("text", "")
        for entry in memory
        for part in (entry.get("content") or {}).get("parts") or ()
    )
    item, size = recall.restore(ranked, room, ",".join(items), html.unescape(held_text))
    if item is None:
        return items, 0, 0
    position = 0
    for i in indices:
        meta = view.metas[i]
        position += len(view.checkpoints[meta.seq]) if meta.checkpoint else 1
        if meta.seq == selected[-1]:
            break
    restored = json.loads(item)["recalled_event_ids"]
    return [*items[:position], item, *items[position:]], size, len(restored)


def _history(session: Session, selected: list[EventMeta], view: history.HistoryView) -> list[str]:
    """The selected entries' history items: checkpoints' from the view, events' from their
    precomputed items."""
    seqs = [meta.seq for meta in selected if not meta.checkpoint]
    items = history.context_items(session.pk, seqs)
    entries: list[str] = []
    for meta in selected:
        if meta.checkpoint:
            entries.extend(view.checkpoints[meta.seq])
        else:
            entries.append(items[meta.seq])
    return entries
