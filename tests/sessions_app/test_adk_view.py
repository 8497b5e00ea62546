"""The pure reading of a client's rewinds and compactions (ADK's contents processor rule)."""

from __future__ import annotations

from sessions_app.context.adk_view import AdkEvent, adk_view


def raw(seq: int, micros: int, invocation: str = "", **extra) -> AdkEvent:
    return AdkEvent(seq, invocation, micros, **extra)


def test_without_markers_nothing_is_hidden():
    view = adk_view([raw(1, 10), raw(2, 20)])
    assert view.hidden == frozenset() and view.placed == {} and view.hidden_events == 0


def test_a_rewind_whose_invocation_is_unknown_drops_only_itself():
    view = adk_view([raw(1, 10, "a"), raw(2, 20, "b", rewind_before="zzz")])
    assert view.hidden == {2} and view.hidden_events == 0


def test_a_rewind_drops_back_to_the_first_event_of_its_invocation():
    events = [raw(1, 10, "a"), raw(2, 20, "b"), raw(3, 30, "a"), raw(4, 40, "c", rewind_before="b")]
    view = adk_view(events)
    assert view.hidden == {2, 3, 4} and view.hidden_events == 2


def test_bounds_are_inclusive_and_the_summary_sits_after_the_last_earlier_event():
    events = [
        raw(1, 10),
        raw(2, 20),
        raw(3, 30),
        raw(4, 35, compaction=(20, 30)),
        raw(5, 40),
    ]
    view = adk_view(events)
    assert view.hidden == {2, 3, 4} and view.hidden_events == 2
    assert 1 < view.placed[4] < 1.5


def test_identical_ranges_keep_the_latest_and_reversed_ranges_hide_nothing():
    events = [raw(1, 10), raw(2, 11, compaction=(10, 10)), raw(3, 12, compaction=(10, 10))]
    assert set(adk_view(events).placed) == {3}
    reversed_range = adk_view([raw(1, 10), raw(2, 11, compaction=(10, 5))])
    assert reversed_range.hidden == {2} and set(reversed_range.placed) == {2}


def test_a_compacted_call_comes_back_for_its_visible_response():
    events = [
        raw(1, 10, call_ids=["c"]),
        raw(2, 11, compaction=(10, 10)),
        raw(3, 12, response_ids=["c"]),
    ]
    view = adk_view(events)
    assert view.hidden == {2} and view.restored == 1 and view.hidden_events == 0
    assert view.placed[2] < 1
