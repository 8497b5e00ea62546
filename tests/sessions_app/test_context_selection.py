"""Properties of history selection (pure): units, truncation, the error mode."""

from __future__ import annotations

from hypothesis import given, settings

from sessions_app.context.select import (
    Overflow,
    build_units,
    event_passes,
    select_history,
)
from sessions_app.events import FUNCTION_CALL, FUNCTION_RESPONSE
from tests.context_strategies import (
    FRAMING,
    ROOMS,
    histories,
    policies,
)

TOOL_TURN = FUNCTION_CALL | FUNCTION_RESPONSE


def unit_of(units):
    owner = {}
    for number, (start, end) in enumerate(units):
        for index in range(start, end + 1):
            owner[index] = number
    return owner


def content_of(metas, unit):
    start, end = unit
    return [i for i in range(start, end + 1) if metas[i].kinds]


def eligible_units(metas, policy):
    """(units with content, the units of the input window, those whose every content event
    passes the filters): what the budgets choose from, oldest first."""
    window_start = len(metas) - policy.max_input_events if policy.max_input_events else 0
    with_content = [u for u in build_units(metas) if content_of(metas, u)]
    in_window = [u for u in with_content if min(content_of(metas, u)) >= window_start]
    passing = [
        u for u in in_window if all(event_passes(metas[i], policy) for i in content_of(metas, u))
    ]
    return with_content, in_window, passing


def fits(metas, units, policy, room):
    used = sum(metas[i].context_bytes for u in units for i in content_of(metas, u))
    items = sum(len(content_of(metas, u)) for u in units)
    return (
        (policy.max_bytes is None or used <= policy.max_bytes)
        and (policy.max_tokens is None or used <= policy.max_tokens * policy.bytes_per_token)
        and used + FRAMING * items <= room
    )


@given(histories())
def test_units_cover_every_event_in_order_and_hold_calls_with_responses(metas):
    units = build_units(metas)
    covered = [i for start, end in units for i in range(start, end + 1)]
    assert covered == list(range(len(metas)))
    owner = unit_of(units)
    call_at = {cid: i for i, m in enumerate(metas) for cid in (m.call_ids or [])}
    for index, meta in enumerate(metas):
        for rid in meta.response_ids or []:
            assert owner[call_at[rid]] == owner[index]


@given(histories(), policies(), ROOMS)
@settings(max_examples=300)
def test_truncate_keeps_the_newest_whole_units_that_fit_in_order(metas, policy, room):
    selection = select_history(metas, policy, request_room_bytes=room, framing_per_item=FRAMING)
    with_content, in_window, passing = eligible_units(metas, policy)
    units = build_units(metas)
    owner = unit_of(units)
    chosen = selection.indices
    kept = sorted({owner[i] for i in chosen})
    kept_units = [units[n] for n in kept]
    # Whole units, in input order, only events with content.
    assert chosen == [i for u in kept_units for i in content_of(metas, u)]
    # Inside the input window, through the filters, within every budget: the newest units
    # that fit, less (when cut) the leading ones that open with a function call or response.
    newest = next(
        passing[start:]
        for start in range(len(passing) + 1)
        if fits(metas, passing[start:], policy, room)
    )
    expected = list(newest)
    if len(newest) < len(passing):
        while expected and metas[content_of(metas, expected[0])[0]].kinds & TOOL_TURN:
            expected.pop(0)
    assert kept_units == expected
    assert fits(metas, kept_units, policy, room)
    assert selection.history_bytes == sum(metas[i].context_bytes for i in chosen)
    # Nothing that fits is left out: the next older unit would break a budget.
    assert selection.truncated == (len(newest) < len(passing))
    if selection.truncated:
        older = passing[len(passing) - len(newest) - 1]
        assert not fits(metas, [older, *newest], policy, room)
        if kept_units:  # and what is kept opens at a turn every provider accepts
            assert not metas[content_of(metas, kept_units[0])[0]].kinds & TOOL_TURN
    # Every input event is accounted for, once.
    content_count = sum(1 for m in metas if m.kinds)
    assert selection.without_content == len(metas) - content_count
    assert selection.dropped_by_window == sum(
        len(content_of(metas, u)) for u in with_content if u not in in_window
    )
    assert selection.dropped_by_filter == sum(
        len(content_of(metas, u)) for u in in_window if u not in passing
    )
    assert selection.dropped + len(chosen) == content_count
    again = select_history(metas, policy, request_room_bytes=room, framing_per_item=FRAMING)
    assert again == selection  # deterministic


@given(histories(), policies(("error", "compress")), ROOMS)
@settings(max_examples=200)
def test_error_mode_selects_everything_eligible_or_names_the_budget(metas, policy, room):
    _with_content, _in_window, passing = eligible_units(metas, policy)
    everything = [i for u in passing for i in content_of(metas, u)]
    total = sum(metas[i].context_bytes for i in everything)
    token_bytes = None if policy.max_tokens is None else policy.max_tokens * policy.bytes_per_token
    limits = [limit for limit in (policy.max_bytes, token_bytes) if limit is not None]
    history_limit = min(limits) if limits else None
    try:
        selection = select_history(metas, policy, request_room_bytes=room, framing_per_item=FRAMING)
    except Overflow as overflow:
        if history_limit is not None and total > history_limit:
            assert (overflow.limit_name, overflow.measured_bytes) == ("history", total)
            assert overflow.limit_bytes == history_limit
        else:
            assert overflow.limit_name == "request" and overflow.limit_bytes == room
            assert overflow.measured_bytes == total + FRAMING * len(everything) > room
    else:
        assert selection.indices == everything and not selection.truncated
        assert fits(metas, passing, policy, room)
