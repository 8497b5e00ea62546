"""An extractive summary holds nothing the credential detector catches: every credential
text of the corpus (``tests/secret_tables.py``), said by the user, by the model in a turn of
several text parts, and by a tool, is left out or redacted, and the summary validates. A
summary outlives its events under ``purge``, so what it quotes is all that is left."""

from __future__ import annotations

from ctxadmin.canonical import canonical_size
from ctxadmin.credentials import looks_like_secret
from sessions_app.compaction import extractive
from sessions_app.compaction.engine import source_index
from sessions_app.compaction.model import SourceEvent, SummaryRequest
from sessions_app.compaction.planning import Plan
from sessions_app.compaction.summary import validate_summary
from tests.compaction_helpers import call, response
from tests.secret_tables import credential_texts

FAR = 1e18
LIMIT = 64 * 1024


def said(seq: int, author: str, *parts: str) -> SourceEvent:
    """An event whose text is in several parts (readers join them with newlines)."""
    role = "user" if author == "user" else "model"
    item = {
        "event_id": f"e{seq}",
        "invocation_id": "",
        "author": author,
        "timestamp": f"2026-01-01T00:00:{seq % 60:02d}+00:00",
        "content": {"role": role, "parts": [{"text": part} for part in parts]},
    }
    return SourceEvent(
        seq=seq,
        event_id=f"e{seq}",
        invocation_id="",
        author=author,
        item=item,
        context_bytes=canonical_size(item),
        timestamp=1_767_225_600.0 + seq,
        turn_complete=True,
    )


def summarize(events: list[SourceEvent]) -> dict:
    source = source_index(Plan(1, len(events), events, []))
    request = SummaryRequest(1, len(events), events, [], source, LIMIT, LIMIT, FAR)
    made = extractive.summarize(request).summary
    validate_summary(made, source, LIMIT)
    return made


def texts_of(summary: dict) -> list[str]:
    found: list[str] = []
    stack: list = [summary]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, str):
            found.append(node)
    return found


def test_no_credential_of_the_corpus_reaches_a_summary():
    credentials = credential_texts()
    leaked = []
    for label, text, secret in credentials:
        events = [
            said(1, "user", f"Please remember this for the trip to Lisbon on 4 June: {text}"),
            call(2, "c1", "lookup"),
            response(3, "c1", {"note": text, "status": "ok"}),
            said(4, "agent", "Noted for Lisbon on 4 June, Alice.", f"You gave me {text}"),
        ]
        summary = summarize(events)
        held = texts_of(summary)
        if any(secret in t for t in held) or any(looks_like_secret(t) for t in held):
            leaked.append(label)
    assert leaked == []


def test_a_private_key_split_across_two_text_parts_is_not_quoted():
    body = "MIIEpAIBAAKCAQEAxk3n4n6H8v9sQ2lW0c5o7b0fJ3y4ZpQh1m2N3b4V5c6X7z8a"
    events = [
        said(1, "user", "Keep my deploy key for Lisbon on 4 June: -----BEGIN RSA PRIVATE"),
        said(2, "agent", "Ready, Alice.", f"KEY-----\n{body}\n-----END RSA PRIVATE KEY-----"),
        said(3, "user", "Thanks", f"{body}\n-----END RSA PRIVATE KEY-----"),
        said(4, "agent", "Kept for 4 June in Lisbon."),
    ]
    summary = summarize(events)
    assert all(body not in t and body[:24] not in t for t in texts_of(summary)), summary
