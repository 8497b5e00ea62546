"""Deciding and choosing (pure; no Django import): which triggers fire, then the range a
checkpoint covers: the longest self-contained prefix before the retained tail, the events
a request names, or the sliding window's whole invocations with their overlap.
"""

from __future__ import annotations

from dataclasses import dataclass

from sessions_app.compaction.model import (
    CheckpointView,
    EngineInput,
    SourceEvent,
    covered,
    open_obligations,
    units,
)
from sessions_app.compaction.policy import CompactionPolicy


def _user_turns_after(events: list[SourceEvent], seq: int) -> int:
    return sum(1 for e in events if e.seq > seq and e.is_user)


def _invocations(events: list[SourceEvent]) -> list[tuple[str, list[SourceEvent]]]:
    """Events grouped by invocation in order of first appearance; an event without an
    invocation id joins the one before it."""
    groups: list[tuple[str, list[SourceEvent]]] = []
    index: dict[str, int] = {}
    for event in events:
        key = event.invocation_id or (groups[-1][0] if groups else "")
        if key not in index:
            index[key] = len(groups)
            groups.append((key, []))
        groups[index[key]][1].append(event)
    return groups


def _complete_invocations(groups: list[tuple[str, list[SourceEvent]]]) -> int:
    """How many leading invocations are complete: all but the last, and the last when it
    ended with ``turn_complete`` or a final model answer."""
    if not groups:
        return 0
    last = groups[-1][1][-1]
    done = last.turn_complete is True or last.is_final_model
    return len(groups) if done else len(groups) - 1


def _sliding_state(inp: EngineInput) -> tuple[list, int, int]:
    """(invocation groups, index of the window start, count of new complete invocations)."""
    events = inp.events
    groups = _invocations(events)
    complete = _complete_invocations(groups)
    previous = next(
        (c for c in reversed(inp.visible) if c.trigger == "sliding_window"),
        None,
    )
    if previous is None:
        return groups, 0, complete
    ids = [key for key, _ in groups]
    if previous.window_end_invocation in ids:
        end_index = ids.index(previous.window_end_invocation)
        new = complete - end_index - 1
        start = max(0, end_index - inp.policy.overlap_size + 1)
        if inp.policy.overlap_size == 0:
            start = end_index + 1
        return groups, start, max(0, new)
    # The previous window's invocations were not loaded: all uncovered ones are new.
    first_new = next(
        (i for i, (_k, evs) in enumerate(groups) if evs[0].seq > previous.last_seq), len(groups)
    )
    return groups, first_new, max(0, complete - first_new)


def fired_triggers(inp: EngineInput, tokens: int) -> list[str]:
    """The triggers whose threshold is reached, in precedence order."""
    policy = inp.policy
    uncovered = [e for e in inp.events if e.content and not covered(e.seq, inp.visible)]
    head_mark = max((c.high_water_seq for c in inp.visible), default=0)
    fired = []
    if policy.token_threshold and tokens >= policy.token_threshold:
        fired.append("token_threshold")
    if policy.event_threshold and len(uncovered) >= policy.event_threshold:
        fired.append("event_threshold")
    if policy.turn_interval and _user_turns_after(inp.events, head_mark) >= policy.turn_interval:
        fired.append("turn_interval")
    if policy.compaction_interval:
        _groups, _start, new = _sliding_state(inp)
        if new >= policy.compaction_interval:
            fired.append("sliding_window")
    return fired


@dataclass(frozen=True)
class Plan:
    first_seq: int
    last_seq: int
    events: list[SourceEvent]  # raw events of the range outside absorbed checkpoints
    absorbed: list[CheckpointView]
    window_end_invocation: str = ""


def _retained_start(raw: list[SourceEvent], policy: CompactionPolicy) -> int:
    """Index in ``raw`` where the retained tail starts (``len(raw)`` when nothing is kept)."""
    spans = units(raw)
    start = len(raw)
    kept_units = kept_events = 0
    users_seen = 0
    users_needed = min(2, sum(1 for e in raw if e.is_user))
    for first, last in reversed(spans):
        content_events = sum(1 for e in raw[first : last + 1] if e.content)
        if policy.event_retention_size is not None:
            enough = kept_events >= policy.event_retention_size
        else:
            enough = kept_units >= (policy.retain_recent_exchanges or 0)
        if enough and users_seen >= users_needed:
            break
        start = first
        kept_units += 1 if content_events else 0
        kept_events += content_events
        users_seen += sum(1 for e in raw[first : last + 1] if e.is_user)
    return start


def plan_prefix(inp: EngineInput) -> Plan | None:
    """The longest self-contained run of units before the retained tail, with the visible
    checkpoints before it that no open obligation separates from it (they are absorbed, so
    the new summary replaces them). A unit holding an open obligation stays raw; when one
    comes first in line, the run after it is taken instead (a disjoint checkpoint)."""
    raw = [e for e in inp.events if not covered(e.seq, inp.visible)]
    tail = _retained_start(raw, inp.policy)
    obligations = open_obligations(raw)
    run: list[int] = []  # indices of the run being collected
    kept_before = -1  # index of the last event kept raw before the run
    for first, last in units(raw):
        if last >= tail:
            break
        if any(first <= i <= last for i in obligations):
            if run:
                break
            kept_before = last
            continue
        run.extend(range(first, last + 1))
    if not run:
        return None
    events = [raw[i] for i in run]
    lower = raw[kept_before].seq if kept_before >= 0 else 0
    absorbed = [c for c in inp.visible if lower < c.first_seq and c.last_seq < events[-1].seq]
    first_seq = min([events[0].seq, *(c.first_seq for c in absorbed)])
    return Plan(first_seq, events[-1].seq, events, absorbed)


def plan_pinned(inp: EngineInput) -> Plan | None:
    """The events a manual request names, if they are a run of uncovered events, in order,
    preceded by nothing uncovered but open obligations, with no open obligation inside and
    no call separated from its response."""
    raw = [e for e in inp.events if not covered(e.seq, inp.visible)]
    pinned = inp.pinned or ()
    ids = [e.event_id for e in raw]
    if not pinned or pinned[0] not in ids:
        return None
    begin = ids.index(pinned[0])
    end = begin + len(pinned)
    if tuple(ids[begin:end]) != pinned:
        return None
    obligations = open_obligations(raw)
    spans = units(raw)
    if any(begin <= i < end for i in obligations):
        return None
    if not any(first == begin for first, _last in spans) or not any(
        last == end - 1 for _first, last in spans
    ):
        return None
    # Before it: only units kept raw for an open obligation.
    for first, last in spans:
        if first < begin and not any(first <= i <= last for i in obligations):
            return None
    run = raw[begin:end]
    lower = raw[begin - 1].seq if begin > 0 else 0
    absorbed = [c for c in inp.visible if lower < c.first_seq and c.last_seq < run[-1].seq]
    first_seq = min([run[0].seq, *(c.first_seq for c in absorbed)])
    return Plan(first_seq, run[-1].seq, run, absorbed)


def plan_window(inp: EngineInput) -> Plan | None:
    """ADK's sliding window: whole invocations from the overlap of the previous window to
    the newest complete one, cut back before an open obligation."""
    groups, start, _new = _sliding_state(inp)
    complete = _complete_invocations(groups)
    chosen = groups[start:complete]
    events = [e for _key, evs in chosen for e in evs]
    obligations = open_obligations(inp.events)
    blocked_seqs = {inp.events[i].seq for i in obligations}
    kept: list[tuple[str, list[SourceEvent]]] = []
    for key, evs in chosen:
        if any(e.seq in blocked_seqs for e in evs):
            break
        kept.append((key, evs))
    if not kept:
        return None
    events = [e for _key, evs in kept for e in evs]
    first_seq, last_seq = events[0].seq, events[-1].seq
    absorbed = [c for c in inp.visible if first_seq <= c.first_seq and c.last_seq <= last_seq]
    raw = [e for e in events if not any(c.first_seq <= e.seq <= c.last_seq for c in absorbed)]
    return Plan(first_seq, last_seq, raw, absorbed, window_end_invocation=kept[-1][0])


def bounded_plan(plan: Plan, policy: CompactionPolicy) -> Plan | None:
    """The oldest part of the plan within ``max_input_events``/``max_input_bytes``, ending on
    a unit boundary; None when not even one unit fits."""
    total_bytes = sum(e.context_bytes for e in plan.events)
    if len(plan.events) <= policy.max_input_events and total_bytes <= policy.max_input_bytes:
        return plan
    count = used = 0
    end = -1
    for first, last in units(plan.events):
        span = plan.events[first : last + 1]
        size = sum(e.context_bytes for e in span)
        if count + len(span) > policy.max_input_events or used + size > policy.max_input_bytes:
            break
        count, used, end = count + len(span), used + size, last
    if end < 0:
        return None
    events = plan.events[: end + 1]
    absorbed = [c for c in plan.absorbed if c.last_seq < events[-1].seq]
    first_seq = min([events[0].seq, *(c.first_seq for c in absorbed)])
    return Plan(first_seq, events[-1].seq, events, absorbed, plan.window_end_invocation)
