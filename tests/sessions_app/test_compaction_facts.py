"""The extractive summarizer keeps both sides' statements of fact as exact, cited excerpts,
most facts per byte first, within its byte target (pure)."""

from __future__ import annotations

from ctxadmin.canonical import canonical_size
from sessions_app.compaction import extractive
from sessions_app.compaction.engine import source_index, summary_item
from sessions_app.compaction.facts import fact_count, statement
from sessions_app.compaction.model import CheckpointView, SummaryRequest
from sessions_app.compaction.planning import Plan
from sessions_app.compaction.summary import validate_summary
from tests.compaction_helpers import source_event

FAR = 1e18

FILLER_USER = "That sounds really wonderful, thanks so much for telling me about it"
FILLER_AGENT = "Wow, that is so great to hear, I am really happy for you"


def said(seq: int, author: str, text: str):
    return source_event(seq, author, text=text)


def summarize(events, target: int = 4096, lineage=()):
    first = lineage[0]["coverage"]["first_seq"] if lineage else events[0].seq
    absorbed = [
        CheckpointView(
            f"c{n}", s["coverage"]["first_seq"], s["coverage"]["last_seq"], "summary", 0, s
        )
        for n, s in enumerate(lineage)
    ]
    source = source_index(Plan(first, events[-1].seq, events, absorbed))
    request = SummaryRequest(
        first, events[-1].seq, events, list(lineage), source, 16384, target, FAR
    )
    summary = extractive.summarize(request).summary
    return summary, source


def quoted(entry: dict) -> str:
    """The exact excerpt a statement entry quotes after its author."""
    return entry["text"].split(": ", 1)[1][1:-1]


def texts_by_id(events) -> dict[str, str]:
    return {e.event_id: e.text for e in events}


def conversation(turns: int):
    """Alternating turns; every third one of each side states facts."""
    events = []
    for seq in range(1, turns + 1):
        author = "user" if seq % 2 else "Melanie"
        if seq % 3 == 0:
            text = f"On May {seq} I took my son Tom to Lake Tahoe; he loved the {seq} km hike."
        else:
            text = FILLER_USER if author == "user" else FILLER_AGENT
        events.append(said(seq, author, text))
    return events


def test_statements_are_kept_whole_or_as_their_leading_words():
    short = "I moved to Boston in May 2022."
    assert statement(f"  {short}\n") == short
    long = "word " * 200 + "Boston"
    kept = statement(long)
    assert long.startswith(kept) and len(kept) <= 600 and "Boston" not in kept


def test_facts_are_counted_from_names_numbers_days_and_preferences():
    assert fact_count("Wow, that is so great to hear") == 0
    assert fact_count("I adopted Oliver on Friday") == 3  # Friday: a day and a name
    assert fact_count("My favourite is the 3 pm class") == 3


def test_both_sides_facts_are_kept_as_exact_cited_excerpts():
    events = [
        said(1, "user", "I moved to Boston in May 2022 and started at the library."),
        said(2, "Melanie", "My daughter Sarah turned 7 last week; we went to Lake Tahoe."),
        said(3, "user", FILLER_USER),
        said(4, "Melanie", FILLER_AGENT),
        said(5, "user", "What should I cook tonight?"),
        said(6, "Melanie", "I decided to sign up for the pottery class on Tuesdays."),
    ]
    summary, source = summarize(events)
    assert validate_summary(summary, source, 16384) == summary
    excerpts = {r["excerpt"] for r in summary["user_requests"]}
    assert "I moved to Boston in May 2022 and started at the library." in excerpts
    statements = summary["critical_context"]
    assert [e["source_event_ids"] for e in statements] == [["e2"]]
    assert quoted(statements[0]) == events[1].text
    assert statements[0]["text"].startswith("Melanie: ")
    # The newest statement is the latest answer, whole; filler states no fact and is left out.
    assert summary["progress"]["active"][0]["text"] == f"Latest answer: {events[5].text}"
    assert not any(FILLER_AGENT in e["text"] for e in statements)
    rendered = summary_item("c", summary)["content"]["parts"][0]["text"]
    for event in (events[0], events[1], events[5]):
        assert event.text in rendered


def test_a_tight_target_keeps_the_most_facts_per_byte_within_it():
    events = conversation(60)
    target = 2048
    summary, source = summarize(events, target=target)
    validate_summary(summary, source, 16384)
    assert canonical_size(summary) <= target
    text = texts_by_id(events)
    kept = summary["user_requests"] + summary["critical_context"]
    assert kept, "nothing was kept"
    for entry in summary["user_requests"]:
        assert entry["excerpt"] in text[entry["event_id"]]
    for entry in summary["critical_context"]:
        (cited,) = entry["source_event_ids"]
        assert quoted(entry) == text[cited]
    # The turns stating facts go before the filler (which only fills what is left over),
    # from both sides, in the order they were said.
    stating = [r for r in summary["user_requests"] if fact_count(r["excerpt"])]
    assert len(stating) >= 3 and len(stating) > len(summary["user_requests"]) - len(stating)
    assert len(summary["critical_context"]) >= 3
    seqs = [int(e["source_event_ids"][0][1:]) for e in summary["critical_context"]]
    assert seqs == sorted(seqs)


def test_merging_keeps_the_absorbed_facts_exact():
    events = conversation(30)
    first, _source = summarize(events[:15], target=3000)
    summary, source = summarize(events[15:], target=3000, lineage=[first])
    validate_summary(summary, source, 16384)
    assert canonical_size(summary) <= 3000
    text = texts_by_id(events)
    cited = [e["source_event_ids"][0] for e in summary["critical_context"]]
    assert any(int(c[1:]) <= 15 for c in cited) and any(int(c[1:]) > 15 for c in cited)
    for entry in summary["critical_context"]:
        assert quoted(entry) == text[entry["source_event_ids"][0]]


def test_a_statement_holding_a_credential_is_not_quoted():
    key = "sk-live-0123456789abcdefghij"
    events = [
        said(1, "user", "Where did you go on Friday?"),
        said(2, "Melanie", f"My key for Paris is {key} on Monday"),
        said(3, "user", FILLER_USER),
        said(4, "Melanie", FILLER_AGENT),
    ]
    summary, source = summarize(events)
    validate_summary(summary, source, 16384)
    assert "sk-live" not in str(summary)
    assert summary["critical_context"] == []
