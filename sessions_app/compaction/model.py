"""The compaction engine's data (pure; no Django import): what a run is given (the source
events, the visible checkpoints, the policy, the automatic state), what a summarizer is
asked and answers, the outcome, and the measures every step shares (tokens, units,
open obligations, the source fingerprint).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ctxadmin.canonical import canonical_size, fingerprint
from sessions_app.compaction.policy import CompactionPolicy
from sessions_app.compaction.summary import (
    SourceIndex,
)

SUMMARY_AUTHOR = "ctxadmin.summary"


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
        return (content or {}).get("parts") or []

    @property
    def is_user(self) -> bool:
        content = self.content
        return self.author == "user" and bool(content) and any("text" in p for p in self.parts)

    @property
    def text(self) -> str:
        """What the event said: its text parts, a model's thoughts left out (a summary never
        quotes them as said)."""
        return "\n".join(
            part["text"] for part in self.parts if "text" in part and not part.get("thought")
        )

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


def tokens_of(byte_count: int, bytes_per_token: int) -> int:
    return -(-byte_count // bytes_per_token)


def item_tokens(item: dict, bytes_per_token: int) -> int:
    return tokens_of(canonical_size(item), bytes_per_token)


def covered(seq: int, checkpoints: list[CheckpointView]) -> bool:
    return any(c.first_seq <= seq <= c.last_seq for c in checkpoints)


def effective_tokens(
    events: list[SourceEvent], visible: list[CheckpointView], bytes_per_token: int
) -> int:
    """Tokens of the history a model gets: visible checkpoints plus uncovered events."""
    total = sum(c.tokens for c in visible)
    for event in events:
        if event.content and not covered(event.seq, visible):
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


def source_fingerprint(events: list[SourceEvent], absorbed: list[CheckpointView]) -> str:
    return fingerprint(
        {
            "events": [[e.seq, e.event_id, fingerprint(e.item)] for e in events],
            "absorbed": [c.id for c in absorbed],
        }
    )
