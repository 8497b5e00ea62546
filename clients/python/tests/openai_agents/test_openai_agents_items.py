"""How stored events read back as the SDK's items (pure: ``_items.history`` and the rule of
when a read of the newest events holds enough of them)."""

from __future__ import annotations

from ctxadmin_client.openai_agents import _items
from ctxadmin_client.openai_agents.session import _enough


def item(n: int) -> dict:
    return {
        "event_id": f"e{n}",
        "invocation_id": f"e{n}",
        "timestamp": float(n),
        "output": {"role": "user", "content": f"m{n}"},
        "custom_metadata": {_items.MARK: _items.ITEM},
    }


def pop(n: int, target: int) -> dict:
    return {
        "event_id": f"p{n}",
        "invocation_id": f"p{n}",
        "timestamp": float(n),
        "actions": {"rewind_before_invocation_id": f"e{target}"},
        "custom_metadata": {_items.MARK: _items.POP},
    }


def summary(n: int, end: float) -> dict:
    text = "[Summary of earlier conversation: events 1 to 4.]"
    return {
        "event_id": f"compaction-{n}",
        "invocation_id": f"compaction-{n}",
        "timestamp": float(n),
        "author": "ctxadmin",
        "actions": {
            "compaction": {
                "start_timestamp": 1.0,
                "end_timestamp": end,
                "compacted_content": {"role": "model", "parts": [{"text": text}]},
            }
        },
        "custom_metadata": {"checkpoint_id": "c1"},
    }


def contents(entries) -> list[str]:
    return [entry.item["content"] for entry in entries]


def test_a_rewind_hides_its_item_and_what_followed_it():
    events = [item(1), item(2), item(3), pop(4, 3), pop(5, 2), item(6)]
    assert contents(_items.history(events, complete=True, summaries=True)) == ["m1", "m6"]


def test_a_rewind_of_an_invocation_before_the_events_read_hides_all_before_it():
    # The newest events of [1, 2, 3, pop 3, 5, pop 5, 7]: pop 5's item lies in them, and
    # the first pop's item lies before them.
    window = [pop(4, 3), item(5), pop(6, 5), item(7)]
    assert contents(_items.history(window, complete=False, summaries=True)) == ["m7"]
    # Read whole, a rewind naming no stored invocation hides nothing.
    assert contents(_items.history([item(1), pop(2, 9)], complete=True, summaries=True)) == ["m1"]


def test_a_summary_stands_where_its_span_ends():
    # Items 1-4 covered (not returned with include_hidden=false), 5 and 6 retained, the
    # summary event stored after them, then 8.
    events = [item(5), item(6), summary(7, end=4.0), item(8)]
    entries = _items.history(events, complete=True, summaries=True)
    assert [entry.event_id for entry in entries] == [None, "e5", "e6", "e8"]
    assert entries[0].item == {
        "role": "assistant",
        "content": "[Summary of earlier conversation: events 1 to 4.]",
    }
    assert [e.event_id for e in _items.history(events, complete=True, summaries=False)] == [
        "e5",
        "e6",
        "e8",
    ]


def test_a_read_of_the_newest_events_is_enough_only_when_no_summary_may_be_misplaced():
    events = [summary(7, end=4.0), item(8), item(9)]
    entries = _items.history(events, complete=False, summaries=True)
    assert _enough(entries, 2)  # the newest two are stored items read in order
    # Three would include the summary, which may stand before retained items not read.
    assert not _enough(entries, 3)
    assert not _enough(_items.history([item(8)], complete=False, summaries=True), 2)
