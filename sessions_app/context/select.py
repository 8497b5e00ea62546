"""Selecting the history for one model call (pure; no Django import).

Works on event metadata only (sizes, kinds, ids), never on content, in one linear pass:

1. group events into units: a function call, everything up to its last response, and any
   unit overlapping that span, form one unit that is kept or dropped whole;
2. keep the units inside the ``max_input_events`` window whose every content event passes
   the filters (events without content never reach a model and are only counted);
3. fit the budgets: under ``truncate`` keep the newest units that fit, stopping at the first
   that does not (older history is never kept past a gap), then drop leading units that
   begin with a function call or response (their user turn was cut: no provider accepts a
   history that starts there); otherwise report the overflow.

The result lists indices in the input's (chronological) order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from sessions_app.context.policy import ContextPolicy
from sessions_app.events import FUNCTION_CALL, FUNCTION_RESPONSE

_TOOL_TURN = FUNCTION_CALL | FUNCTION_RESPONSE


class EventMeta(NamedTuple):
    """What selection needs of an event. The trailing fields matter only to policies that
    filter on them, so a caller may leave them out (and skip reading them)."""

    seq: int
    kinds: int
    call_ids: list[str] | None
    response_ids: list[str] | None
    context_bytes: int
    author: str = ""
    invocation_id: str = ""
    timestamp: float = 0.0  # seconds since the epoch
    # A checkpoint standing in for the events it covers (its seq sorts just before the
    # first of them): filters do not apply to it, budgets do.
    checkpoint: bool = False


class Overflow(Exception):
    """The selection does not fit: ``limit_name`` says which budget (``history`` or
    ``request``), with both figures in bytes."""

    def __init__(self, limit_name: str, measured_bytes: int, limit_bytes: int):
        super().__init__(f"{limit_name}: {measured_bytes} > {limit_bytes} bytes")
        self.limit_name = limit_name
        self.measured_bytes = measured_bytes
        self.limit_bytes = limit_bytes


@dataclass(frozen=True)
class Selection:
    indices: list[int]
    input_events: int
    without_content: int
    dropped_by_window: int
    dropped_by_filter: int
    dropped_by_budget: int
    history_bytes: int
    truncated: bool

    @property
    def dropped(self) -> int:
        return self.dropped_by_window + self.dropped_by_filter + self.dropped_by_budget


def build_units(metas: list[EventMeta]) -> list[tuple[int, int]]:
    """Inclusive index ranges covering every event, in order, never splitting a call from
    its responses."""
    count = len(metas)
    if count == 0:
        return []
    reach = list(range(count))
    call_at: dict[str, int] = {}
    for index, meta in enumerate(metas):
        if meta.call_ids:
            for call_id in meta.call_ids:
                call_at[call_id] = index
        if meta.response_ids:
            for response_id in meta.response_ids:
                start = call_at.get(response_id)
                if start is not None and start < index and reach[start] < index:
                    reach[start] = index
    units: list[tuple[int, int]] = []
    start, end = 0, reach[0]
    for index in range(1, count):
        if index > end:
            units.append((start, end))
            start, end = index, reach[index]
        elif reach[index] > end:
            end = reach[index]
    units.append((start, end))
    return units


def event_passes(meta: EventMeta, policy: ContextPolicy) -> bool:
    if meta.checkpoint:
        return True
    if not policy.authors.allows(meta.author):
        return False
    if not policy.invocation_ids.allows(meta.invocation_id):
        return False
    if policy.content_include_mask is not None and not meta.kinds & policy.content_include_mask:
        return False
    if meta.kinds & policy.content_exclude_mask:
        return False
    if policy.timestamp_from is not None and meta.timestamp < policy.timestamp_from:
        return False
    if policy.timestamp_to is not None and meta.timestamp > policy.timestamp_to:
        return False
    return not (policy.final_only and meta.kinds & (FUNCTION_CALL | FUNCTION_RESPONSE))


def _opens_with_tool(metas: list[EventMeta], unit: tuple[int, int, int, int]) -> bool:
    """Whether the unit's first event with content is a function call or response."""
    first = next(i for i in range(unit[0], unit[1] + 1) if metas[i].kinds)
    return bool(metas[first].kinds & _TOOL_TURN)


def select_history(
    metas: list[EventMeta],
    policy: ContextPolicy,
    *,
    request_room_bytes: int,
    framing_per_item: int,
) -> Selection:
    """``request_room_bytes``: what the whole-request budget leaves for history once the
    fixed parts (instructions, tools, current input, ...) are counted."""
    window_start = max(0, len(metas) - policy.max_input_events) if policy.max_input_events else 0
    without_content = sum(1 for meta in metas if not meta.kinds)
    dropped_window = dropped_filter = 0
    kept: list[tuple[int, int, int, int]] = []  # (start, end, bytes, items) of passing units
    filtering = policy.has_filters
    for start, end in build_units(metas):
        if start == end:  # the common case, kept cheap: one event, no tool pairing
            meta = metas[start]
            if not meta.kinds:
                continue
            if start < window_start:
                dropped_window += 1
            elif filtering and not event_passes(meta, policy):
                dropped_filter += 1
            else:
                kept.append((start, end, meta.context_bytes, 1))
            continue
        items = [i for i in range(start, end + 1) if metas[i].kinds]
        if not items:
            continue
        if start < window_start:
            dropped_window += len(items)
            continue
        if filtering and not all(event_passes(metas[i], policy) for i in items):
            dropped_filter += len(items)
            continue
        kept.append((start, end, sum(metas[i].context_bytes for i in items), len(items)))

    history_limit = policy.history_byte_limit()
    total_bytes = sum(unit[2] for unit in kept)
    total_items = sum(unit[3] for unit in kept)
    fits_history = history_limit is None or total_bytes <= history_limit
    fits_request = total_bytes + framing_per_item * total_items <= request_room_bytes
    chosen = kept
    truncated = False
    if not (fits_history and fits_request):
        if policy.overflow != "truncate":
            if not fits_history:
                raise Overflow("history", total_bytes, history_limit)
            raise Overflow(
                "request", total_bytes + framing_per_item * total_items, request_room_bytes
            )
        truncated = True
        used_bytes = used_request = 0
        first_kept = len(kept)
        for position in range(len(kept) - 1, -1, -1):
            _start, _end, unit_bytes, unit_items = kept[position]
            next_bytes = used_bytes + unit_bytes
            next_request = used_request + unit_bytes + framing_per_item * unit_items
            if (
                history_limit is not None and next_bytes > history_limit
            ) or next_request > request_room_bytes:
                break
            used_bytes, used_request, first_kept = next_bytes, next_request, position
        # A cut history starts at a turn every provider accepts: a unit that begins with a
        # function call (or an orphaned response) lost the user turn that caused it.
        while first_kept < len(kept) and _opens_with_tool(metas, kept[first_kept]):
            used_bytes -= kept[first_kept][2]
            first_kept += 1
        chosen = kept[first_kept:]
        total_bytes = used_bytes

    indices = [i for start, end, _b, _n in chosen for i in range(start, end + 1) if metas[i].kinds]
    dropped_budget = sum(unit[3] for unit in kept) - len(indices)
    return Selection(
        indices=indices,
        input_events=len(metas),
        without_content=without_content,
        dropped_by_window=dropped_window,
        dropped_by_filter=dropped_filter,
        dropped_by_budget=dropped_budget,
        history_bytes=total_bytes,
        truncated=truncated,
    )
