"""The compaction engine (pure; no Django import).

Input: a session's events not hidden by a visible checkpoint (plus, for the sliding window,
the overlap it re-summarises), its visible checkpoints, the policy, a summarizer callable and
an absolute deadline. Output: an ``Outcome`` — ``skipped`` with a reason, ``error`` with a
typed code, or ``compacted`` with a checkpoint candidate (range, summary or projected items,
tokens before and after). Nothing given is mutated; the caller commits with compare-and-swap.

Steps:
1. decide: policy, triggers (token pressure, then event count, then turn interval, then the
   sliding window), automatic limits;
2. choose the range: the retained tail grows back from the newest event over
   ``retain_recent_exchanges`` complete units (or ``event_retention_size`` events) and the
   last two user events; the range before it never holds an open obligation (a function
   call without a response, a pending confirmation or credential request) nor splits a call
   from its response — the longest self-contained prefix. The sliding window takes whole
   invocations instead, with ``overlap_size`` of the previous window;
3. project large tool responses (audit retention): when that alone brings token pressure
   under the threshold, the checkpoint is ``pruned`` and no summarizer runs;
4. summarise, validate against the source (one repair call on an invalid reply);
5. re-measure: a checkpoint must reduce the effective context.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ctxadmin.canonical import canonical_json, canonical_size, fingerprint
from sessions_app.compaction.policy import CompactionPolicy
from sessions_app.compaction.summary import (
    SourceIndex,
    SummaryInvalid,
    SummaryTooLarge,
    cited_ids,
    render,
    validate_summary,
)

SUMMARY_AUTHOR = "ctxadmin.summary"


# ----------------------------------------------------------------------------- inputs


@dataclass(frozen=True)
class SourceEvent:
    """One stored event as compaction sees it: ``item`` is its secret-pruned history item
    (what a model would be sent)."""

    seq: int
    event_id: str
    invocation_id: str
    author: str
    item: dict
    context_bytes: int
    timestamp: float
    turn_complete: bool | None = None

    @property
    def content(self) -> dict | None:
        return self.item.get("content")

    @property
    def parts(self) -> list[dict]:
        content = self.content
        return content["parts"] if content else []

    @property
    def is_user(self) -> bool:
        content = self.content
        return self.author == "user" and bool(content) and any("text" in p for p in self.parts)

    @property
    def text(self) -> str:
        return "\n".join(part["text"] for part in self.parts if "text" in part)

    @property
    def calls(self) -> list[dict]:
        return [part["function_call"] for part in self.parts if "function_call" in part]

    @property
    def responses(self) -> list[dict]:
        return [part["function_response"] for part in self.parts if "function_response" in part]

    @property
    def is_final_model(self) -> bool:
        return not self.is_user and not self.calls and not self.responses and bool(self.text)


@dataclass(frozen=True)
class CheckpointView:
    """A visible checkpoint: its range, its rendered items and what later ones build on."""

    id: str
    first_seq: int
    last_seq: int
    representation: str  # summary | pruned
    tokens: int
    summary: dict | None = None
    trigger: str = ""
    high_water_seq: int = 0  # the session's newest seq when it was made
    window_end_invocation: str = ""  # sliding window: the last invocation it covers
    lineage_requests: frozenset[tuple[str, str]] = frozenset()


@dataclass(frozen=True)
class AutomaticState:
    recent_successes: int = 0  # successful automatic compactions in the last hour
    backing_off: bool = False  # after ineffective results, until the backoff ends


@dataclass(frozen=True)
class EngineInput:
    events: list[SourceEvent]  # seq order
    visible: list[CheckpointView]  # by first_seq
    policy: CompactionPolicy
    origin: str = "automatic"  # automatic | manual | overflow
    current_input_tokens: int = 0
    automatic: AutomaticState = field(default_factory=AutomaticState)
    # A manual request may name the exact events to summarise: the oldest uncovered ones,
    # in order, self-contained; anything else is a ``compaction_conflict``.
    pinned: tuple[str, ...] | None = None
    # A context build that must fit this many history bytes: the summary aims at what the
    # rest of the history leaves (overflow: compress).
    history_limit_bytes: int | None = None


@dataclass(frozen=True)
class SummaryRequest:
    first_seq: int
    last_seq: int
    events: list[SourceEvent]  # raw events of the range outside absorbed checkpoints
    lineage: list[dict]  # the absorbed checkpoints' summaries, oldest first
    source: SourceIndex
    max_bytes: int
    target_bytes: int  # what to aim for: a summary should leave room under the threshold
    deadline: float  # time.monotonic() value
    repair: tuple[Any, str] | None = None  # (the invalid reply, the validation error)


@dataclass(frozen=True)
class SummaryReply:
    summary: Any
    usage: dict = field(default_factory=dict)  # input_tokens, output_tokens


class SummarizerFailed(Exception):
    """A summarizer could not answer: ``code`` is ``summarizer_error`` or
    ``deadline_exceeded``; the message is content-free."""

    def __init__(self, code: str, message: str, usage: dict | None = None):
        super().__init__(message)
        self.code = code
        self.usage = usage or {}


Summarizer = Callable[[SummaryRequest], SummaryReply]


# ----------------------------------------------------------------------------- output


@dataclass(frozen=True)
class Outcome:
    status: str  # skipped | compacted | error
    reason: str = ""  # the skip reason or the error code
    message: str = ""
    trigger: str = ""
    representation: str = ""
    first_seq: int | None = None
    last_seq: int | None = None
    source_event_ids: tuple[str, ...] = ()  # raw events summarised, in seq order
    source_fingerprint: str = ""
    absorbed: tuple[str, ...] = ()  # checkpoint ids it subsumes
    summary: dict | None = None
    items: tuple[dict, ...] = ()  # the history items that replace the range
    tokens_before: int = 0
    tokens_after: int = 0
    usage: dict = field(default_factory=dict)
    projected: tuple[str, ...] = ()
    window_end_invocation: str = ""


def skipped(reason: str, message: str, trigger: str = "", tokens: int = 0) -> Outcome:
    return Outcome("skipped", reason, message, trigger=trigger, tokens_before=tokens)


def failed(code: str, message: str, trigger: str = "", **extra) -> Outcome:
    return Outcome("error", code, message, trigger=trigger, **extra)


# ----------------------------------------------------------------------------- helpers


def tokens_of(byte_count: int, bytes_per_token: int) -> int:
    return -(-byte_count // bytes_per_token)


def item_tokens(item: dict, bytes_per_token: int) -> int:
    return tokens_of(canonical_size(item), bytes_per_token)


def _covered(seq: int, checkpoints: list[CheckpointView]) -> bool:
    return any(c.first_seq <= seq <= c.last_seq for c in checkpoints)


def effective_tokens(
    events: list[SourceEvent], visible: list[CheckpointView], bytes_per_token: int
) -> int:
    """Tokens of the history a model gets: visible checkpoints plus uncovered events."""
    total = sum(c.tokens for c in visible)
    for event in events:
        if event.content and not _covered(event.seq, visible):
            total += tokens_of(event.context_bytes, bytes_per_token)
    return total


def units(events: list[SourceEvent]) -> list[tuple[int, int]]:
    """Inclusive index ranges never separating a call from its responses."""
    reach = list(range(len(events)))
    call_at: dict[str, int] = {}
    for index, event in enumerate(events):
        for call in event.calls:
            call_at[call["id"]] = index
        for response in event.responses:
            start = call_at.get(response["id"])
            if start is not None and reach[start] < index:
                reach[start] = index
    result: list[tuple[int, int]] = []
    start = 0
    while start < len(events):
        end = reach[start]
        index = start
        while index <= end:
            end = max(end, reach[index])
            index += 1
        result.append((start, end))
        start = end + 1
    return result


def open_obligations(events: list[SourceEvent]) -> set[int]:
    """Indices of events holding a call that nothing later answers (a tool still running,
    a confirmation or credential request still pending)."""
    answered = {r["id"] for event in events for r in event.responses}
    return {
        index
        for index, event in enumerate(events)
        if any(call["id"] not in answered for call in event.calls)
    }


def _source_fingerprint(events: list[SourceEvent], absorbed: list[CheckpointView]) -> str:
    return fingerprint(
        {
            "events": [[e.seq, e.event_id, fingerprint(e.item)] for e in events],
            "absorbed": [c.id for c in absorbed],
        }
    )


# ----------------------------------------------------------------------------- decide


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
    uncovered = [e for e in inp.events if e.content and not _covered(e.seq, inp.visible)]
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


# ----------------------------------------------------------------------------- choose


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
    raw = [e for e in inp.events if not _covered(e.seq, inp.visible)]
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
    raw = [e for e in inp.events if not _covered(e.seq, inp.visible)]
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


def _bounded(plan: Plan, policy: CompactionPolicy) -> Plan | None:
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


# ----------------------------------------------------------------------------- project


_ARTIFACT_NAME = re.compile(r"^[A-Za-z0-9](?!.*\.\.)[A-Za-z0-9._:@-]{0,255}\Z")


def projected_artifact_name(event_id: str, index: int) -> str | None:
    """The session artifact that keeps part ``index`` of the event's original tool response
    (None when the event id cannot make an artifact name: the event itself stays then)."""
    name = f"tool-output.{event_id}.{index}"
    return name if _ARTIFACT_NAME.match(name) else None


def projection(response: dict, event_id: str, index: int = 0) -> dict:
    """A deterministic stand-in for a large tool response: hash, size, and where the
    original is stored (a session artifact holding the response's canonical JSON)."""
    body = canonical_json(response.get("response"))
    artifact = projected_artifact_name(event_id, index)
    return {
        **{k: v for k, v in response.items() if k != "response"},
        "response": {
            "projected": True,
            "sha256": hashlib.sha256(body).hexdigest(),
            "bytes": len(body),
            "original": f"artifact:{artifact}" if artifact else f"event:{event_id}",
        },
    }


def project_items(events: list[SourceEvent], over_bytes: int) -> tuple[list[dict], list[str]]:
    items, projected = [], []
    for event in events:
        item = event.item
        content = event.content
        if content and event.responses:
            parts = []
            changed = False
            for index, part in enumerate(content["parts"]):
                response = part.get("function_response")
                if response is not None and canonical_size(response.get("response")) > over_bytes:
                    parts.append({"function_response": projection(response, event.event_id, index)})
                    changed = True
                else:
                    parts.append(part)
            if changed:
                item = {**item, "content": {**content, "parts": parts}}
                projected.append(event.event_id)
        items.append(item)
    return items, projected


# ----------------------------------------------------------------------------- summarise


def source_index(plan: Plan) -> SourceIndex:
    lineage_ids: set[str] = set()
    lineage_requests: set[tuple[str, str]] = set()
    lineage_users: set[str] = set()
    tools: set[str] = set()
    for checkpoint in plan.absorbed:
        if checkpoint.summary:
            lineage_ids |= cited_ids(checkpoint.summary)
            tools.update(checkpoint.summary["tools"])
            for request in checkpoint.summary["user_requests"]:
                lineage_users.add(request["event_id"])
                if "excerpt" in request:
                    lineage_requests.add((request["event_id"], request["excerpt"]))
        lineage_requests |= checkpoint.lineage_requests
    for event in plan.events:
        tools.update(call["name"] for call in event.calls)
    return SourceIndex(
        first_seq=plan.first_seq,
        last_seq=plan.last_seq,
        event_ids=frozenset({e.event_id for e in plan.events} | lineage_ids),
        user_texts={e.event_id: e.text for e in plan.events if e.is_user},
        lineage_requests=frozenset(lineage_requests),
        lineage_user_ids=frozenset(lineage_users),
        tool_names=frozenset(tools),
    )


def summary_item(checkpoint_id: str, summary: dict) -> dict:
    return {
        "checkpoint_id": checkpoint_id,
        "author": SUMMARY_AUTHOR,
        "content": {"role": "model", "parts": [{"text": render(summary)}]},
        "coverage": summary["coverage"],
    }


def target_summary_bytes(policy: CompactionPolicy) -> int:
    """A quarter of the token threshold (at least 1 KiB), so a summary leaves room to grow."""
    if policy.token_threshold:
        quarter = max(1024, policy.token_threshold * policy.bytes_per_token // 4)
        return min(policy.max_summary_bytes, quarter)
    return policy.max_summary_bytes


def _target_bytes(plan: Plan, inp: EngineInput) -> int:
    target = target_summary_bytes(inp.policy)
    if inp.history_limit_bytes is None:
        return target
    absorbed = {c.id for c in plan.absorbed}
    rest = sum(c.tokens * inp.policy.bytes_per_token for c in inp.visible if c.id not in absorbed)
    rest += sum(
        e.context_bytes
        for e in inp.events
        if e.content and e.seq > plan.last_seq and not _covered(e.seq, inp.visible)
    )
    # The rendered summary is wrapped in a history item (about 200 bytes) and reads longer
    # than its JSON; aim below what is left.
    return max(256, min(target, (inp.history_limit_bytes - rest) * 3 // 4 - 200))


def _merge_usage(total: dict, usage: dict) -> None:
    for key, value in usage.items():
        if isinstance(value, int):
            total[key] = total.get(key, 0) + value
    total["calls"] = total.get("calls", 0) + 1


def _summarise(
    plan: Plan, inp: EngineInput, summarizer: Summarizer, deadline: float, clock
) -> tuple[dict | None, dict, str, str]:
    """(summary, usage, error code, message): one call, and one repair on an invalid reply."""
    policy = inp.policy
    source = source_index(plan)
    request = SummaryRequest(
        first_seq=plan.first_seq,
        last_seq=plan.last_seq,
        events=plan.events,
        lineage=[c.summary for c in plan.absorbed if c.summary],
        source=source,
        max_bytes=policy.max_summary_bytes,
        target_bytes=_target_bytes(plan, inp),
        deadline=deadline,
    )
    usage: dict = {}
    for attempt in range(2):
        if clock() >= deadline:
            return None, usage, "deadline_exceeded", "The deadline passed before the summary."
        try:
            reply = summarizer(request)
        except SummarizerFailed as exc:
            _merge_usage(usage, exc.usage)
            return None, usage, exc.code, str(exc)
        _merge_usage(usage, reply.usage)
        if clock() >= deadline:
            return None, usage, "deadline_exceeded", "The summarizer answered after the deadline."
        try:
            return validate_summary(reply.summary, source, policy.max_summary_bytes), usage, "", ""
        except SummaryTooLarge as exc:
            error_code, error = "summary_too_large", str(exc)
        except SummaryInvalid as exc:
            error_code, error = "invalid_summary", str(exc)
        if attempt == 0:
            request = SummaryRequest(**{**request.__dict__, "repair": (reply.summary, error)})
    return None, usage, error_code, f"After one repair: {error}"


# ----------------------------------------------------------------------------- run


def compact(
    inp: EngineInput,
    summarizer: Summarizer,
    *,
    deadline: float,
    checkpoint_id: str,
    clock: Callable[[], float] = time.monotonic,
) -> Outcome:
    policy = inp.policy
    bpt = policy.bytes_per_token
    tokens = effective_tokens(inp.events, inp.visible, bpt) + inp.current_input_tokens
    automatic = inp.origin == "automatic"
    if automatic and not policy.automatic:
        return skipped("not_triggered", "Automatic compaction is off for this session.")
    fired = fired_triggers(inp, tokens)
    if automatic and not fired:
        return skipped("below_trigger", "No trigger reached its threshold.", tokens=tokens)
    trigger = fired[0] if fired else inp.origin
    if automatic:
        if inp.automatic.backing_off:
            return skipped(
                "automatic_limit", "Backing off after ineffective compactions.", trigger, tokens
            )
        if inp.automatic.recent_successes >= policy.max_automatic_per_hour:
            return skipped(
                "automatic_limit",
                "The hourly limit of automatic compactions is reached.",
                trigger,
                tokens,
            )
        mark = max((c.high_water_seq for c in inp.visible), default=0)
        new_tokens = sum(
            tokens_of(e.context_bytes, bpt) for e in inp.events if e.seq > mark and e.content
        )
        if inp.visible and new_tokens < policy.min_new_tokens:
            return skipped(
                "insufficient_new_tokens",
                "Too few new tokens since the last compaction.",
                trigger,
                tokens,
            )

    if inp.pinned is not None:
        plan = plan_pinned(inp)
        if plan is None:
            return failed(
                "compaction_conflict",
                "The named events are not the oldest uncovered events, in order, self-contained.",
                trigger,
            )
    else:
        plan = plan_window(inp) if trigger == "sliding_window" else plan_prefix(inp)
    if plan is None:
        if automatic:
            return skipped(
                "insufficient_history", "Nothing before the retained events.", trigger, tokens
            )
        return failed("nothing_to_compact", "Nothing before the retained events.", trigger)
    bounded = _bounded(plan, policy)
    if bounded is None:
        return failed(
            "input_too_large",
            "The first unit to summarise exceeds max_input_events or max_input_bytes.",
            trigger,
        )
    plan = bounded
    if clock() >= deadline:
        return failed("deadline_exceeded", "The deadline passed while planning.", trigger)

    base = {
        "trigger": trigger,
        "first_seq": plan.first_seq,
        "last_seq": plan.last_seq,
        "source_event_ids": tuple(e.event_id for e in plan.events),
        "source_fingerprint": _source_fingerprint(plan.events, plan.absorbed),
        "absorbed": tuple(c.id for c in plan.absorbed),
        "tokens_before": tokens,
        "window_end_invocation": plan.window_end_invocation,
    }
    remaining = [c for c in inp.visible if c.id not in base["absorbed"]]

    def after(items_tokens: int) -> int:
        covered = CheckpointView("", plan.first_seq, plan.last_seq, "", items_tokens)
        return effective_tokens(inp.events, [*remaining, covered], bpt) + inp.current_input_tokens

    # Projection: large tool responses replaced by their hash, size and stored original.
    over = policy.project_tool_responses_over_bytes
    if (
        over is not None
        and policy.retention == "audit"
        and not plan.absorbed
        and trigger in ("token_threshold", "overflow", "manual")
    ):
        items, projected = project_items(plan.events, over)
        if projected:
            projected_tokens = sum(item_tokens(i, bpt) for i in items if i.get("content"))
            tokens_after = after(projected_tokens)
            threshold = policy.token_threshold or 0
            if tokens_after < threshold and tokens - tokens_after >= policy.min_reclaim_tokens:
                return Outcome(
                    "compacted",
                    representation="pruned",
                    items=tuple(items),
                    tokens_after=tokens_after,
                    projected=tuple(projected),
                    **base,
                )

    summary, usage, code, message = _summarise(plan, inp, summarizer, deadline, clock)
    if summary is None:
        return failed(code, message, trigger, usage=usage, tokens_before=tokens)
    item = summary_item(checkpoint_id, summary)
    tokens_after = after(item_tokens(item, bpt))
    if tokens_after >= tokens or tokens - tokens_after < policy.min_reclaim_tokens:
        return failed(
            "ineffective_compaction",
            f"The summary reclaims {tokens - tokens_after} tokens; at least "
            f"{max(1, policy.min_reclaim_tokens)} are needed.",
            trigger,
            usage=usage,
            tokens_before=tokens,
            tokens_after=tokens_after,
        )
    return Outcome(
        "compacted",
        representation="summary",
        summary=summary,
        items=(item,),
        tokens_after=tokens_after,
        usage=usage,
        **base,
    )
