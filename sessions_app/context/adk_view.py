"""What a client's own rewind and compaction events hide from a context (pure; no Django).

ADK's contents processor reads a session's events in two steps, and so does this module:

1. rewinds: walking back from the newest event, an event with
   ``actions.rewind_before_invocation_id = X`` drops itself and every event back to the
   first event of invocation X (inclusive), and the walk resumes before them; a rewind whose
   invocation is not found earlier drops only itself;
2. compactions, over what the rewinds left: a compaction event covers the events whose
   timestamps lie within ``[start_timestamp, end_timestamp]``; one whose range lies inside
   another's (or equals a later one's) is subsumed and ignored; the raw events covered by
   any kept range are hidden (partly overlapping compactions both stay), and each kept
   compaction's content stands where its end timestamp falls: after the last event at or
   before it, before the first event after it. A compaction event is never history itself.

Times are compared in whole microseconds (what PostgreSQL stores), the bounds rounded as
the events' own times were. A response whose call a compaction hid gets its call back
(a model must never see a response without its call), as ADK restores it.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from typing import NamedTuple


class AdkEvent(NamedTuple):
    """One visible event as this module reads it, in seq order."""

    seq: int
    invocation_id: str
    micros: int  # its timestamp, microseconds since the epoch
    call_ids: list[str] | None = None
    response_ids: list[str] | None = None
    compaction: tuple[int, int] | None = None  # (start, end) in microseconds
    rewind_before: str | None = None


@dataclass(frozen=True)
class AdkView:
    hidden: frozenset[int]  # seqs of events (markers included) out of the context
    placed: dict[int, float]  # a kept compaction event's seq -> where its content stands
    hidden_events: int  # raw events hidden (markers not counted)
    restored: int  # calls given back to responses whose call a compaction hid


def _rewound(events: list[AdkEvent]) -> list[AdkEvent]:
    first: dict[str, int] = {}
    for index, event in enumerate(events):
        if event.invocation_id and event.invocation_id not in first:
            first[event.invocation_id] = index
    kept: list[AdkEvent] = []
    index = len(events) - 1
    while index >= 0:
        event = events[index]
        if event.rewind_before:
            target = first.get(event.rewind_before)
            if target is not None and target < index:
                index = target
        else:
            kept.append(event)
        index -= 1
    kept.reverse()
    return kept


def rewound(events: list[AdkEvent]) -> frozenset[int]:
    """The seqs a client's rewinds take out (the rewind events with them)."""
    return frozenset(e.seq for e in events) - {e.seq for e in _rewound(events)}


def _kept_compactions(events: list[AdkEvent]) -> list[tuple[int, int, int]]:
    """(index, start, end) of the compactions no other contains, in event order."""
    ranges = [(i, *e.compaction) for i, e in enumerate(events) if e.compaction is not None]
    retained: set[int] = set()
    widest: int | None = None
    for index, _start, end in sorted(ranges, key=lambda r: (r[1], -r[2], -r[0])):
        if widest is None or end > widest:
            retained.add(index)
            widest = end
    return [r for r in ranges if r[0] in retained]


def adk_view(events: list[AdkEvent]) -> AdkView:
    live = _rewound(events)
    hidden = {event.seq for event in events} - {event.seq for event in live}
    hidden_events = sum(
        1 for e in events if e.seq in hidden and e.compaction is None and not e.rewind_before
    )
    kept = _kept_compactions(live)
    coverage: list[list[int]] = []
    for _index, start, end in sorted(kept, key=lambda r: (r[1], r[2])):
        if start > end:
            continue
        if coverage and start <= coverage[-1][1]:
            coverage[-1][1] = max(coverage[-1][1], end)
        else:
            coverage.append([start, end])
    starts = [start for start, _end in coverage]

    def covered(micros: int) -> bool:
        at = bisect_right(starts, micros) - 1
        return at >= 0 and micros <= coverage[at][1]

    raw = [e for e in live if e.compaction is None]
    compacted = [e for e in raw if covered(e.micros)]
    hidden |= {e.seq for e in live if e.compaction is not None}
    hidden |= {e.seq for e in compacted}
    restored = _restore_calls(raw, {e.seq for e in compacted})
    hidden -= restored
    hidden_events += len(compacted) - len(restored)
    # A restored call goes back just before its response, never ahead of a summary.
    anchors = [e for e in raw if e.seq not in hidden and e.seq not in restored]
    return AdkView(
        frozenset(hidden), _placements(live, kept, anchors), hidden_events, len(restored)
    )


def _restore_calls(raw: list[AdkEvent], compacted: set[int]) -> set[int]:
    """The compacted events holding the calls of responses that stay visible."""
    visible_calls = {c for e in raw if e.seq not in compacted for c in e.call_ids or ()}
    orphans = {
        r
        for e in raw
        if e.seq not in compacted
        for r in e.response_ids or ()
        if r not in visible_calls
    }
    latest: dict[str, int] = {}
    for event in raw:
        if event.seq in compacted:
            for call in event.call_ids or ():
                if call in orphans:
                    latest[call] = event.seq
    return set(latest.values())


def _placements(
    live: list[AdkEvent], kept: list[tuple[int, int, int]], visible: list[AdkEvent]
) -> dict[int, float]:
    """Each kept compaction's content after the last visible event sorting before it (by
    time, then by position), inside the gap (seq, seq + 0.5) that no checkpoint uses."""
    order = {event.seq: index for index, event in enumerate(live)}
    keys = sorted(((e.micros, order[e.seq]), e.seq) for e in visible)
    bounds = [key for key, _seq in keys]
    newest: list[int] = []  # the greatest seq among the first n keys
    for _key, seq in keys:
        newest.append(max(seq, newest[-1]) if newest else seq)
    anchors: dict[int, list[tuple[int, int, int]]] = {}
    for index, _start, end in kept:
        before = bisect_right(bounds, (end, index))
        anchor = newest[before - 1] if before else 0
        anchors.setdefault(anchor, []).append((end, index, live[index].seq))
    placed: dict[int, float] = {}
    for anchor, entries in anchors.items():
        entries.sort()
        for rank, (_end, _index, seq) in enumerate(entries):
            placed[seq] = anchor + 0.1 + 0.3 * rank / len(entries)
    return placed
