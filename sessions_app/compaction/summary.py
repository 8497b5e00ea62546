"""The structured summary: its closed schema, its validation against the source events, and
its rendering for a model (pure; no Django import).

A summary stands in for a range of events, so every claim in it must be traceable: each
entry cites event ids of the range (or of the lineage it absorbs), each user request quotes
an exact excerpt of the user event it cites (or records that a secret was omitted: an
excerpt never holds a credential), the tool names are exactly those used, and ``coverage``
is exactly the summarised range. No text of a summary holds a credential (as
``ctxadmin.pruning.looks_like_secret`` judges): a summary outlives the events it replaces
and is sent to model providers, so one that quotes a credential anywhere is rejected at
that text's path (the extractive summarizer redacts; a model gets its one repair).

    {"version": 1, "language": "en",
     "objective": ITEM | null,
     "user_requests": [{"event_id", "excerpt"} | {"event_id", "omitted": "secret"}],
     "constraints": [ITEM], "decisions": [ITEM],
     "progress": {"completed": [ITEM], "active": [ITEM], "blocked": [ITEM], "pending": [ITEM]},
     "critical_context": [ITEM], "errors": [ITEM],
     "artifact_refs": [{"ref", "source_event_ids"}],
     "tools": ["exact tool name", ...],
     "coverage": {"first_seq": N, "last_seq": M}}
    ITEM = {"text": "...", "source_event_ids": ["...", ...]}
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ctxadmin.canonical import canonical_size
from ctxadmin.pruning import echoed, looks_like_secret

VERSION = 1
MAX_TEXT_CHARS = 1000
MAX_EXCERPT_CHARS = 1000
MAX_CITATIONS = 8
MAX_USER_REQUESTS = 32
MAX_ITEMS = 16
MAX_TOOLS = 64
ITEM_LISTS = ("constraints", "decisions", "critical_context", "errors")
PROGRESS_KEYS = ("completed", "active", "blocked", "pending")
TOP_KEYS = frozenset(
    {
        "version",
        "language",
        "objective",
        "user_requests",
        *ITEM_LISTS,
        "progress",
        "artifact_refs",
        "tools",
        "coverage",
    }
)
_LANGUAGE = re.compile(r"^(und|[a-z]{2,3}(-[A-Za-z0-9]{2,8})*)\Z")


class SummaryInvalid(ValueError):
    """The summary breaks a rule; ``path`` names where (fed back to a model for one repair)."""

    def __init__(self, path: str, message: str):
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message


class SummaryTooLarge(ValueError):
    def __init__(self, size: int, limit: int):
        super().__init__(f"the summary is {size} bytes; the limit is {limit}")
        self.size = size
        self.limit = limit


@dataclass(frozen=True)
class SourceIndex:
    """What a summary of one range may cite and quote."""

    first_seq: int
    last_seq: int
    event_ids: frozenset[str]  # of the range and of the absorbed lineage's citations
    user_texts: dict[str, str]  # user event id -> its text, for the range's user events
    lineage_requests: frozenset[tuple[str, str]]  # (event_id, excerpt) already validated
    lineage_user_ids: frozenset[str]  # user events cited by the absorbed lineage
    tool_names: frozenset[str]  # used in the range and the lineage


def _text(value: Any, path: str, limit: int) -> str:
    if not isinstance(value, str) or not value.strip():
        raise SummaryInvalid(path, "must be a non-empty string")
    if len(value) > limit:
        raise SummaryInvalid(path, f"must be at most {limit} characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate, legal in JSON text but not in UTF-8
        raise SummaryInvalid(path, "must be valid Unicode") from None
    return value


def _closed(value: Any, keys: frozenset[str] | set[str], path: str) -> dict:
    if not isinstance(value, dict):
        raise SummaryInvalid(path, "must be an object")
    unknown = sorted(set(value) - set(keys))
    if unknown:
        raise SummaryInvalid(f"{path}.{echoed(unknown[0])}", "unknown field")
    missing = sorted(set(keys) - set(value))
    if missing:
        raise SummaryInvalid(f"{path}.{missing[0]}", "is required")
    return value


def _citations(value: Any, path: str, source: SourceIndex) -> None:
    if not isinstance(value, list) or not 1 <= len(value) <= MAX_CITATIONS:
        raise SummaryInvalid(path, f"must list 1 to {MAX_CITATIONS} event ids")
    if len(set(map(str, value))) != len(value):
        raise SummaryInvalid(path, "repeats an event id")
    for index, event_id in enumerate(value):
        if not isinstance(event_id, str) or event_id not in source.event_ids:
            raise SummaryInvalid(f"{path}[{index}]", "is not an event of the summarised range")


_CREDENTIAL = "holds a credential: leave it out or write [redacted] in its place"


def _item(value: Any, path: str, source: SourceIndex) -> None:
    item = _closed(value, {"text", "source_event_ids"}, path)
    if looks_like_secret(_text(item["text"], f"{path}.text", MAX_TEXT_CHARS)):
        raise SummaryInvalid(f"{path}.text", _CREDENTIAL)
    _citations(item["source_event_ids"], f"{path}.source_event_ids", source)


def _items(value: Any, path: str, source: SourceIndex, limit: int = MAX_ITEMS) -> None:
    if not isinstance(value, list) or len(value) > limit:
        raise SummaryInvalid(path, f"must be a list of at most {limit} entries")
    seen: set[str] = set()
    for index, item in enumerate(value):
        _item(item, f"{path}[{index}]", source)
        if item["text"] in seen:
            raise SummaryInvalid(f"{path}[{index}]", "repeats an entry")
        seen.add(item["text"])


def _user_request(value: Any, path: str, source: SourceIndex) -> tuple:
    if not isinstance(value, dict):
        raise SummaryInvalid(path, "must be an object")
    if "omitted" in value:
        entry = _closed(value, {"event_id", "omitted"}, path)
        if entry["omitted"] != "secret":
            raise SummaryInvalid(f"{path}.omitted", "must be 'secret'")
    else:
        entry = _closed(value, {"event_id", "excerpt"}, path)
    event_id = entry["event_id"]
    if not isinstance(event_id, str) or (
        event_id not in source.user_texts and event_id not in source.lineage_user_ids
    ):
        raise SummaryInvalid(f"{path}.event_id", "is not a user event of the summarised range")
    if "omitted" in entry:
        return (event_id, None)
    excerpt = _text(entry["excerpt"], f"{path}.excerpt", MAX_EXCERPT_CHARS)
    if looks_like_secret(excerpt):
        raise SummaryInvalid(
            f"{path}.excerpt", "holds a credential: record {'omitted': 'secret'} instead"
        )
    text = source.user_texts.get(event_id)
    if text is not None:
        if excerpt not in text:
            raise SummaryInvalid(f"{path}.excerpt", "is not an exact excerpt of the cited event")
    elif (event_id, excerpt) not in source.lineage_requests:
        raise SummaryInvalid(f"{path}.excerpt", "is not an exact excerpt of the cited event")
    return (event_id, excerpt)


def validate_summary(summary: Any, source: SourceIndex, max_bytes: int) -> dict:
    """``summary`` if it keeps every rule; else ``SummaryInvalid`` or ``SummaryTooLarge``."""
    top = _closed(summary, TOP_KEYS, "summary")
    if type(top["version"]) is not int or top["version"] != VERSION:
        raise SummaryInvalid("summary.version", f"must be {VERSION}")
    if not isinstance(top["language"], str) or not _LANGUAGE.match(top["language"]):
        raise SummaryInvalid("summary.language", "must be a language tag such as 'en' or 'und'")
    if top["objective"] is not None:
        _item(top["objective"], "summary.objective", source)
    requests = top["user_requests"]
    if not isinstance(requests, list) or len(requests) > MAX_USER_REQUESTS:
        raise SummaryInvalid(
            "summary.user_requests", f"must be a list of at most {MAX_USER_REQUESTS} entries"
        )
    seen_requests: set[tuple] = set()
    for index, request in enumerate(requests):
        key = _user_request(request, f"summary.user_requests[{index}]", source)
        if key in seen_requests:
            raise SummaryInvalid(f"summary.user_requests[{index}]", "repeats an entry")
        seen_requests.add(key)
    for name in ITEM_LISTS:
        _items(top[name], f"summary.{name}", source)
    progress = _closed(top["progress"], frozenset(PROGRESS_KEYS), "summary.progress")
    for name in PROGRESS_KEYS:
        _items(progress[name], f"summary.progress.{name}", source)
    refs = top["artifact_refs"]
    if not isinstance(refs, list) or len(refs) > MAX_ITEMS:
        raise SummaryInvalid("summary.artifact_refs", f"must be a list of at most {MAX_ITEMS}")
    for index, ref in enumerate(refs):
        path = f"summary.artifact_refs[{index}]"
        entry = _closed(ref, {"ref", "source_event_ids"}, path)
        if looks_like_secret(_text(entry["ref"], f"{path}.ref", 256)):
            raise SummaryInvalid(f"{path}.ref", _CREDENTIAL)
        _citations(entry["source_event_ids"], f"{path}.source_event_ids", source)
    tools = top["tools"]
    if not isinstance(tools, list) or not all(isinstance(name, str) for name in tools):
        raise SummaryInvalid("summary.tools", "must be a list of tool names")
    if sorted(set(tools)) != sorted(source.tool_names) or len(tools) != len(set(tools)):
        raise SummaryInvalid(
            "summary.tools", "must name exactly the tools used in the range, once each"
        )
    coverage = _closed(top["coverage"], {"first_seq", "last_seq"}, "summary.coverage")
    if coverage != {"first_seq": source.first_seq, "last_seq": source.last_seq} or not all(
        type(seq) is int for seq in coverage.values()
    ):
        raise SummaryInvalid(
            "summary.coverage",
            f"must be exactly first_seq {source.first_seq} and last_seq {source.last_seq}",
        )
    size = canonical_size(top)
    if size > max_bytes:
        raise SummaryTooLarge(size, max_bytes)
    return top


def cited_ids(summary: dict) -> set[str]:
    """Every event id a valid summary cites (the lineage a later summary may cite)."""
    ids = {request["event_id"] for request in summary["user_requests"]}
    entries = [summary["objective"]] if summary["objective"] else []
    for name in ITEM_LISTS:
        entries.extend(summary[name])
    for name in PROGRESS_KEYS:
        entries.extend(summary["progress"][name])
    entries.extend(summary["artifact_refs"])
    for entry in entries:
        ids.update(entry["source_event_ids"])
    return ids


def empty_summary(first_seq: int, last_seq: int, tools: list[str], language: str = "und") -> dict:
    return {
        "version": VERSION,
        "language": language,
        "objective": None,
        "user_requests": [],
        "constraints": [],
        "decisions": [],
        "progress": {name: [] for name in PROGRESS_KEYS},
        "critical_context": [],
        "errors": [],
        "artifact_refs": [],
        "tools": sorted(tools),
        "coverage": {"first_seq": first_seq, "last_seq": last_seq},
    }


def json_schema(max_bytes: int) -> dict:
    """The schema sent to model providers (structured output)."""
    citations = {
        "type": "array",
        "items": {"type": "string"},
        "minItems": 1,
        "maxItems": MAX_CITATIONS,
    }
    item = {
        "type": "object",
        "properties": {
            "text": {"type": "string", "maxLength": MAX_TEXT_CHARS},
            "source_event_ids": citations,
        },
        "required": ["text", "source_event_ids"],
        "additionalProperties": False,
    }
    items = {"type": "array", "items": item, "maxItems": MAX_ITEMS}
    request = {
        "type": "object",
        "properties": {
            "event_id": {"type": "string"},
            "excerpt": {"type": "string", "maxLength": MAX_EXCERPT_CHARS},
            "omitted": {"type": "string", "enum": ["secret"]},
        },
        "required": ["event_id"],
        "additionalProperties": False,
    }
    return {
        "type": "object",
        "description": f"A structured summary of at most {max_bytes} bytes of compact JSON.",
        "properties": {
            "version": {"type": "integer", "enum": [VERSION]},
            "language": {"type": "string"},
            "objective": {"anyOf": [item, {"type": "null"}]},
            "user_requests": {"type": "array", "items": request, "maxItems": MAX_USER_REQUESTS},
            **{name: items for name in ITEM_LISTS},
            "progress": {
                "type": "object",
                "properties": {name: items for name in PROGRESS_KEYS},
                "required": list(PROGRESS_KEYS),
                "additionalProperties": False,
            },
            "artifact_refs": {
                "type": "array",
                "maxItems": MAX_ITEMS,
                "items": {
                    "type": "object",
                    "properties": {"ref": {"type": "string"}, "source_event_ids": citations},
                    "required": ["ref", "source_event_ids"],
                    "additionalProperties": False,
                },
            },
            "tools": {"type": "array", "items": {"type": "string"}, "maxItems": MAX_TOOLS},
            "coverage": {
                "type": "object",
                "properties": {
                    "first_seq": {"type": "integer"},
                    "last_seq": {"type": "integer"},
                },
                "required": ["first_seq", "last_seq"],
                "additionalProperties": False,
            },
        },
        "required": sorted(TOP_KEYS),
        "additionalProperties": False,
    }


def render(summary: dict) -> str:
    """The summary as the text a model reads in place of the covered events (deterministic)."""
    coverage = summary["coverage"]
    lines = [
        f"[Summary of earlier conversation: events {coverage['first_seq']} to "
        f"{coverage['last_seq']}. It replaces them; the quoted requests are the user's words.]"
    ]
    if summary["objective"]:
        lines.append(f"Objective: {summary['objective']['text']}")
    if summary["user_requests"]:
        lines.append("User requests:")
        for request in summary["user_requests"]:
            if "excerpt" in request:
                lines.append(f'- "{request["excerpt"]}"')
            else:
                lines.append("- (a request containing a secret was omitted)")
    sections = [
        ("Constraints", summary["constraints"]),
        ("Decisions", summary["decisions"]),
        ("Completed", summary["progress"]["completed"]),
        ("In progress", summary["progress"]["active"]),
        ("Blocked", summary["progress"]["blocked"]),
        ("Pending", summary["progress"]["pending"]),
        ("Critical context", summary["critical_context"]),
        ("Errors", summary["errors"]),
    ]
    for title, entries in sections:
        if entries:
            lines.append(f"{title}:")
            lines.extend(f"- {entry['text']}" for entry in entries)
    if summary["artifact_refs"]:
        lines.append(
            "Stored originals: " + ", ".join(ref["ref"] for ref in summary["artifact_refs"])
        )
    if summary["tools"]:
        lines.append("Tools used: " + ", ".join(summary["tools"]))
    return "\n".join(lines)
