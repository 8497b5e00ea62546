"""The extractive summarizer: a valid structured summary without a model (pure; offline,
deterministic).

It keeps what a model cannot recover once the events are gone: the user's requests as
exact excerpts (a request that looks like it carries a credential becomes an omission
record), the other side's statements of fact (names, numbers, dates, places, preferences,
decisions) as exact excerpts in ``critical_context``, the tools used with their outcomes,
the errors, and the latest state of the work — merged with the lineage it absorbs. When the
byte target is tight, the excerpts and outcomes are kept by their facts per byte
(``sessions_app.compaction.facts``), the newest first among equals, and listed in the order
they were said.

Every other text is the service's own wording around quoted model and tool text, so a
credential in it is redacted rather than the entry dropped: tool outcomes are rendered with
secret-named keys pruned, and every entry (those carried from the lineage too, which older
versions may have written unredacted) passes ``redact_secret_text``. The summary validator
holds every text to the same detector.
"""

from __future__ import annotations

from ctxadmin.canonical import canonical_json, canonical_size
from ctxadmin.pruning import REDACTED, looks_like_secret, prune_secrets, redact_secret_text
from sessions_app.compaction.facts import fact_count, statement, worth
from sessions_app.compaction.model import SourceEvent, SummaryReply, SummaryRequest
from sessions_app.compaction.summary import (
    ITEM_LISTS,
    MAX_CITATIONS,
    MAX_ITEMS,
    MAX_USER_REQUESTS,
    PROGRESS_KEYS,
    VERSION,
)

OUTCOME_CHARS = 160
LATEST_CHARS = 240
AUTHOR_CHARS = 64
# The lists whose entries are kept by their worth when the target is tight (and how many).
KEPT_BY_WORTH = (
    (("user_requests",), MAX_USER_REQUESTS),
    (("critical_context",), MAX_ITEMS),
    (("progress", "completed"), MAX_ITEMS),
)


def _excerpt(text: str, limit: int) -> str:
    """A prefix of ``text`` (so an exact excerpt), cut at a word boundary when it is long."""
    text = text.strip()
    if len(text) <= limit:
        return text
    cut = text[:limit]
    space = cut.rfind(" ")
    return cut[:space] if space > limit // 2 else cut


def _clean(text: str) -> str:
    """``text`` with its credential-looking spans redacted (all of it, if a span resists)."""
    if not looks_like_secret(text):
        return text
    text = redact_secret_text(text)
    return REDACTED if looks_like_secret(text) else text


def _brief(value) -> str:
    """A tool payload as compact JSON, secret-named keys pruned, credentials redacted, cut
    (and checked again: a cut can leave the head of a credential)."""
    raw = _clean(canonical_json(prune_secrets(value)).decode("utf-8"))
    return _clean(raw if len(raw) <= OUTCOME_CHARS else raw[: OUTCOME_CHARS - 1] + "…")


def _entry(text: str, *event_ids: str) -> dict:
    ids = list(dict.fromkeys(event_ids))[:MAX_CITATIONS]
    return {"text": text, "source_event_ids": ids}


def _carried(entry: dict, field: str = "text") -> dict:
    return {**entry, field: _clean(entry[field])}


def _from_events(events: list[SourceEvent]) -> dict:
    requests: list[dict] = []
    statements: list[tuple[dict, bool]] = []  # (entry, its whole excerpt is in the answer)
    completed: list[dict] = []
    errors: list[dict] = []
    calls: dict[str, tuple[str, str]] = {}  # call id -> (tool name, event id)
    latest: dict | None = None
    for event in events:
        if event.is_user:
            if event.text.strip():
                excerpt = statement(event.text)
                requests.append(_request(event.event_id, excerpt, event.text))
            continue
        for call in event.calls:
            calls[call["id"]] = (call["name"], event.event_id)
        for response in event.responses:
            name, call_event = calls.get(response["id"], (response["name"], event.event_id))
            body = response.get("response")
            failed = isinstance(body, dict) and ("error" in body or "exception" in body)
            entry = _entry(f"{name}: {_brief(body)}", call_event, event.event_id)
            (errors if failed else completed).append(entry)
        if event.is_final_model:
            said = _said(event)
            answer = _clean(_excerpt(_clean(event.text), LATEST_CHARS))
            latest = _entry(f"Latest answer: {answer}", event.event_id)
            if said is not None:
                statements.append((said, statement(event.text) in answer))
    # The latest answer stands for its own statement when it holds all of it.
    statements = [
        said
        for said, whole in statements
        if not (whole and latest and said["source_event_ids"] == latest["source_event_ids"])
    ]
    return {
        "requests": requests,
        "statements": statements,
        "completed": completed,
        "errors": errors,
        "latest": latest,
    }


def _said(event: SourceEvent) -> dict | None:
    """A statement of fact by the other side, its exact excerpt quoted after the author;
    none when it states no fact or holds a credential."""
    excerpt = statement(event.text)
    if not fact_count(excerpt) or looks_like_secret(excerpt):
        return None
    author = _clean(event.author.strip()[:AUTHOR_CHARS]) or "model"
    return _entry(f'{author}: "{excerpt}"', event.event_id)


def _request(event_id: str, excerpt: str, text: str) -> dict:
    """A request entry; an omission when the text (or its cut excerpt) holds a credential."""
    if looks_like_secret(text) or looks_like_secret(excerpt):
        return {"event_id": event_id, "omitted": "secret"}
    return {"event_id": event_id, "excerpt": excerpt}


def _dedupe(entries: list[dict], key) -> list[dict]:
    seen, kept = set(), []
    for entry in reversed(entries):  # the newest copy wins
        marker = key(entry)
        if marker not in seen:
            seen.add(marker)
            kept.append(entry)
    return list(reversed(kept))


def _request_key(entry: dict):
    return (entry["event_id"], entry.get("excerpt"))


def summarize(request: SummaryRequest) -> SummaryReply:
    found = _from_events(request.events)
    lineage = request.lineage
    # A carried request keeps its entry; one quoting a credential becomes an omission.
    carried = [
        _request(r["event_id"], r["excerpt"], r["excerpt"]) if "excerpt" in r else r
        for s in lineage
        for r in s["user_requests"]
    ]
    requests = carried + found["requests"]
    requests = _dedupe(requests, _request_key)
    lists = {name: [_carried(e) for s in lineage for e in s[name]] for name in ITEM_LISTS}
    lists["errors"] += found["errors"]
    lists["critical_context"] += found["statements"]
    progress = {
        name: [_carried(e) for s in lineage for e in s["progress"][name]] for name in PROGRESS_KEYS
    }
    progress["completed"] += found["completed"]
    # Only the newest "latest answer" is active work; older ones are history.
    progress["active"] = [found["latest"]] if found["latest"] else progress["active"][-1:]
    objective = next((_carried(s["objective"]) for s in lineage if s["objective"]), None)
    if objective is None:
        first = next((r for r in requests if "excerpt" in r), None)
        if first is not None:
            objective = _entry(_excerpt(first["excerpt"], 200), first["event_id"])
    refs = [_carried(ref, "ref") for s in lineage for ref in s["artifact_refs"]]
    summary = {
        "version": VERSION,
        "language": next((s["language"] for s in lineage), "und"),
        "objective": objective,
        "user_requests": requests,
        **{name: _newest(entries, name) for name, entries in lists.items()},
        "progress": {name: _newest(entries, name) for name, entries in progress.items()},
        "artifact_refs": _dedupe(refs, lambda e: e["ref"])[-MAX_ITEMS:],
        "tools": sorted(request.source.tool_names),
        "coverage": {"first_seq": request.first_seq, "last_seq": request.last_seq},
    }
    # Quoting whole statements must still reclaim: they take at most a third of what the
    # range holds.
    source = sum(e.context_bytes for e in request.events) + sum(map(canonical_size, lineage))
    kept = _keep_worth(summary, request.target_bytes, source // 3)
    return SummaryReply(_fit(kept, request.target_bytes), {})


def _newest(entries: list[dict], name: str) -> list[dict]:
    """One entry per text; the newest ``MAX_ITEMS`` unless the list is kept by worth."""
    entries = _dedupe(entries, lambda e: e["text"])
    return entries if name in {p[-1] for p, _cap in KEPT_BY_WORTH} else entries[-MAX_ITEMS:]


def _worth(entry: dict) -> float:
    if "omitted" in entry:
        return 1.0  # small, and says a request was made
    return worth(entry.get("excerpt", entry.get("text", "")))


def _keep_worth(summary: dict, limit: int, share: int) -> dict:
    """The requests, statements and outcomes that fit ``limit`` beside the rest of the
    summary (and ``share`` bytes), most facts per byte first (the newer first among equals),
    in their order."""
    candidates = []
    for path, cap in KEPT_BY_WORTH:
        holder = summary["progress"] if path[0] == "progress" else summary
        entries = holder[path[-1]]
        holder[path[-1]] = []
        candidates += [(path, cap, index, entry) for index, entry in enumerate(entries)]
    room = min(share, limit - canonical_size(summary))
    kept: dict[tuple, list[tuple[int, dict]]] = {path: [] for path, _cap in KEPT_BY_WORTH}
    for path, cap, index, entry in sorted(
        candidates, key=lambda c: (_worth(c[3]), c[2]), reverse=True
    ):
        cost = canonical_size(entry) + 1
        if cost <= room and len(kept[path]) < cap:
            kept[path].append((index, entry))
            room -= cost
    for path, entries in kept.items():
        holder = summary["progress"] if path[0] == "progress" else summary
        holder[path[-1]] = [entry for _index, entry in sorted(entries, key=lambda e: e[0])]
    return summary


def _fit(summary: dict, limit: int) -> dict:
    """Drop the oldest entries, least important first, until the summary fits ``limit``."""
    order = [
        ("progress", "completed"),
        ("critical_context",),
        ("decisions",),
        ("user_requests",),
        ("errors",),
        ("constraints",),
        ("progress", "pending"),
        ("progress", "blocked"),
        ("artifact_refs",),
    ]
    while canonical_size(summary) > limit:
        for path in order:
            holder = summary["progress"] if path[0] == "progress" else summary
            entries = holder[path[-1]]
            if entries:
                entries.pop(0)
                break
        else:
            if summary["progress"]["active"]:
                summary["progress"]["active"].pop(0)
            elif summary["objective"] is not None:
                summary["objective"] = None
            else:
                return summary  # nothing left to drop; the validator reports the size
    return summary
