"""The summary's rules, as properties: every valid summary of a generated source passes,
and every rule-breaking mutation of one is rejected."""

from __future__ import annotations

import copy
import random

import pytest
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from ctxadmin.canonical import canonical_size
from ctxadmin.pruning import looks_like_secret
from sessions_app.compaction import extractive
from sessions_app.compaction.engine import source_index
from sessions_app.compaction.model import (
    CheckpointView,
    SummaryRequest,
)
from sessions_app.compaction.planning import Plan
from sessions_app.compaction.summary import (
    ITEM_LISTS,
    MAX_ITEMS,
    MAX_USER_REQUESTS,
    PROGRESS_KEYS,
    TOP_KEYS,
    SummaryInvalid,
    SummaryTooLarge,
    validate_summary,
)
from tests.compaction_helpers import at_path, call, model, response, user

FAR = 1e18  # a deadline that never passes


# ----------------------------------------------------------------------------- summaries
# Valid summaries to break: the extractive summarizer's, over generated conversations (with
# an absorbed earlier summary), filled out with generated entries in every section.

WORDS = ("book", "a", "table", "for", "two", "near", "the", "station", "café", "日本", "quiet")
TOOL_NAMES = ("book", "lookup", "search.flights", "send_mail", "adk_request_confirmation")
CREDENTIALS = (
    "api_key=sk-live-0123456789abcdefghij",
    "Authorization: Bearer abcdefghijklmnop0123",
    "password: hunter2hunter2",
    "AKIAABCDEFGHIJKLMNOP",
    "ghp_" + "a1" * 16,
)
MAX = 1 << 20
SEEDS = st.integers(0, 2**32 - 1)  # texts and citations come from a seeded generator: fast
STEPS = st.lists(
    st.sampled_from(["user", "secret", "model", "secret_model", "call", "answer", "secret_answer"]),
    max_size=10,
)


def sentence(rng) -> str:
    return " ".join(rng.sample(WORDS, rng.randint(4, len(WORDS))))


def conversation_part(rng, steps, first_seq: int) -> list:
    """Events from ``first_seq`` for ``steps``, every call answered within them (a summarised
    range holds no open obligation); the texts and names come from ``rng``."""
    events, open_calls = [], []
    for seq, step in enumerate(steps, first_seq):
        if step == "user":
            events.append(user(seq, sentence(rng)))
        elif step == "secret":
            credential = rng.choice(CREDENTIALS)
            events.append(user(seq, f"{sentence(rng)} {credential} {sentence(rng)}"))
        elif step == "secret_model":
            credential = rng.choice(CREDENTIALS)
            events.append(model(seq, f"{sentence(rng)} {credential} {sentence(rng)}"))
        elif step == "call":
            open_calls.append(f"c{seq}")
            events.append(call(seq, f"c{seq}", name=rng.choice(TOOL_NAMES)))
        elif step in ("answer", "secret_answer") and open_calls:
            body = rng.choice([{"ok": seq}, {"error": "timeout"}])
            if step == "secret_answer":
                credential = rng.choice(CREDENTIALS)
                body = rng.choice([{"note": credential}, {"token": credential, "ok": seq}])
            events.append(response(seq, open_calls.pop(0), body))
        else:
            events.append(model(seq, sentence(rng)))
    for seq, call_id in enumerate(open_calls, first_seq + len(steps)):
        events.append(response(seq, call_id))
    return events


def _extractive(plan):
    source = source_index(plan)
    lineage = [c.summary for c in plan.absorbed]
    request = SummaryRequest(
        plan.first_seq, plan.last_seq, plan.events, lineage, source, MAX, MAX, FAR
    )
    return extractive.summarize(request).summary, source


def citations(rng, source) -> list[str]:
    ids = sorted(source.event_ids)
    return rng.sample(ids, rng.randint(1, min(8, len(ids))))


def quote(rng, source) -> tuple[str, str]:
    """(a user event id, an exact excerpt of its text) for a request without a credential."""
    plain = sorted(i for i, text in source.user_texts.items() if not looks_like_secret(text))
    event_id = rng.choice(plain)
    text = source.user_texts[event_id]
    start = rng.randrange(len(text))
    excerpt = text[start : rng.randint(start + 1, len(text))]
    return event_id, excerpt if excerpt.strip() else text


@st.composite
def valid_summaries(draw):
    """(summary, source): the extractive summary of a generated range (absorbing the
    summary of generated earlier events, when there are any), with generated entries
    added to every section. The range holds a plain user request, one holding a
    credential, a tool call with its response, and an answer."""
    rng = random.Random(draw(SEEDS))
    earlier = conversation_part(rng, draw(STEPS), 1)
    absorbed = []
    if earlier:
        summary, _source = _extractive(Plan(1, earlier[-1].seq, earlier, []))
        absorbed = [CheckpointView("c1", 1, earlier[-1].seq, "summary", 0, summary=summary)]
    steps = ["user", "secret", "call", "answer", "model", "secret_model", *draw(STEPS)]
    steps += ["call", "secret_answer"]
    events = conversation_part(rng, steps, len(earlier) + 1)
    first_seq = 1 if earlier else events[0].seq
    summary, source = _extractive(Plan(first_seq, events[-1].seq, events, absorbed))
    summary["language"] = rng.choice(["en", "und", "de", "pt-BR", "zh-Hant"])
    if summary["objective"] is None or rng.random() < 0.5:
        summary["objective"] = {"text": sentence(rng), "source_event_ids": citations(rng, source)}
    holders = [(summary, name) for name in ITEM_LISTS]
    holders += [(summary["progress"], name) for name in PROGRESS_KEYS]
    for holder, name in holders:
        entries = holder[name]
        texts = {entry["text"] for entry in entries}
        for _ in range(rng.randint(0 if entries else 1, 2)):
            text = sentence(rng)
            if text not in texts and len(entries) < MAX_ITEMS:
                texts.add(text)
                entries.append({"text": text, "source_event_ids": citations(rng, source)})
    for number in range(rng.randint(1, 3)):
        ref = f"artifact:report-{number}.pdf"
        summary["artifact_refs"].append({"ref": ref, "source_event_ids": citations(rng, source)})
    requests = summary["user_requests"]
    taken = {(r["event_id"], r.get("excerpt")) for r in requests}
    for _ in range(rng.randint(0, 3)):
        event_id, excerpt = quote(rng, source)
        if (event_id, excerpt) not in taken and len(requests) < MAX_USER_REQUESTS:
            taken.add((event_id, excerpt))
            requests.append({"event_id": event_id, "excerpt": excerpt})
    return summary, source


def _path(path) -> str:
    return "summary" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path)


def _items(summary):
    paths = [("objective",)] if summary["objective"] is not None else []
    paths += [(name, i) for name in ITEM_LISTS for i in range(len(summary[name]))]
    paths += [
        ("progress", name, i)
        for name in PROGRESS_KEYS
        for i in range(len(summary["progress"][name]))
    ]
    return paths


def _requests(summary, kind):
    return [("user_requests", i) for i, r in enumerate(summary["user_requests"]) if kind in r]


def _refs(summary):
    return [("artifact_refs", i) for i in range(len(summary["artifact_refs"]))]


def _objects(summary):
    """Every closed object below the top, with the keys it allows."""
    found = [(("progress",), set(PROGRESS_KEYS)), (("coverage",), {"first_seq", "last_seq"})]
    found += [(p, {"text", "source_event_ids"}) for p in _items(summary)]
    found += [(p, {"event_id", "excerpt", "omitted"}) for p in _requests(summary, "event_id")]
    found += [(p, {"ref", "source_event_ids"}) for p in _refs(summary)]
    return found


LISTS = (
    ("user_requests",),
    *((name,) for name in ITEM_LISTS),
    *(("progress", name) for name in PROGRESS_KEYS),
    ("artifact_refs",),
    ("tools",),
)


def _strings(summary):
    """(path of an object, its free-text key, the longest it may be)."""
    found = [(p, "text", 1000) for p in _items(summary)]
    found += [(p, "ref", 256) for p in _refs(summary)]
    found += [(p, "excerpt", 1000) for p in _requests(summary, "excerpt")]
    return found


def _outside_ids(source):
    """Ids that are no event of the range nor of what it absorbs."""
    beyond = st.integers(source.last_seq + 1, source.last_seq + 50).map(lambda s: f"e{s}")
    return (beyond | st.text(max_size=6)).filter(lambda i: i not in source.event_ids)


def _set(summary, path, value):
    at_path(summary, path[:-1])[path[-1]] = value
    return summary


NOT_STRINGS = (None, True, 0, 1.5, [], ["x"], {"x": 1})
NOT_LISTS = (None, True, 0, "x", {}, {"x": 1})
# A mutation breaks one rule of a valid summary: mutation(draw, summary, source) yields
# (broken summary, the path the validator must name, the byte limit); it works on copies.
# Where a rule has a few telling values, every one of them is tried.


def _unknown_top_field(draw, summary, source):
    key = draw(st.text(min_size=1, max_size=10).filter(lambda k: k not in TOP_KEYS))
    yield {**summary, key: None}, _path((key,)), MAX


def _unknown_nested_field(draw, summary, source):
    path, allowed = draw(st.sampled_from(_objects(summary)))
    key = draw(st.text(min_size=1, max_size=10).filter(lambda k: k not in allowed))
    broken = copy.deepcopy(summary)
    at_path(broken, path)[key] = draw(st.sampled_from(NOT_STRINGS))
    yield broken, _path((*path, key)), MAX


def _missing_top_field(draw, summary, source):
    for key in TOP_KEYS:
        yield {k: v for k, v in summary.items() if k != key}, _path((key,)), MAX


def _missing_nested_field(draw, summary, source):
    path, _allowed = draw(st.sampled_from(_objects(summary)))
    for key in at_path(summary, path):
        broken = copy.deepcopy(summary)
        del at_path(broken, path)[key]
        # A request without its "omitted" or "excerpt" is an excerpt entry missing one.
        missing = "excerpt" if key in ("omitted", "excerpt") else key
        yield broken, _path((*path, missing)), MAX


def _not_an_object(draw, summary, source):
    for value in (None, [], [summary], "summary", 1):
        yield value, "summary", MAX


def _wrong_version(draw, summary, source):
    for value in (0, 2, -1, "1", 1.0, True, None, [1]):
        yield {**summary, "version": value}, "summary.version", MAX


def _wrong_language(draw, summary, source):
    for value in (None, 1, "", "e", "EN", "English", "en_US", "en-", " en", "en\n", "en-x"):
        yield {**summary, "language": value}, "summary.language", MAX


def _wrong_objective(draw, summary, source):
    for value in (True, 0, "x", [], ["x"]):
        yield {**summary, "objective": value}, "summary.objective", MAX


def _not_a_list(draw, summary, source):
    for path in LISTS:
        for value in NOT_LISTS:
            yield _set(copy.deepcopy(summary), path, value), _path(path), MAX
    for value in (None, True, 0, "x", [], ["x"]):  # progress is an object of lists
        yield {**summary, "progress": value}, "summary.progress", MAX


def _too_many_entries(draw, summary, source):
    rng = random.Random(draw(SEEDS))
    for path in LISTS:
        if path == ("tools",):  # tools must be exactly those used: a long list repeats
            continue
        broken = copy.deepcopy(summary)
        entries = at_path(broken, path)
        if path == ("user_requests",):
            taken = {(r["event_id"], r.get("excerpt")) for r in entries}
            for _attempt in range(10_000):
                if len(entries) > MAX_USER_REQUESTS:
                    break
                event_id, excerpt = quote(rng, source)
                if (event_id, excerpt) not in taken:
                    taken.add((event_id, excerpt))
                    entries.append({"event_id": event_id, "excerpt": excerpt})
            assert len(entries) > MAX_USER_REQUESTS
        else:
            key = "ref" if path == ("artifact_refs",) else "text"
            while len(entries) <= MAX_ITEMS:
                text = f"entry {len(entries)}"
                entries.append({key: text, "source_event_ids": citations(rng, source)})
        yield broken, _path(path), MAX


def _bad_free_text(draw, summary, source):
    """Blank, not a string, too long, or not valid Unicode (a lone surrogate)."""
    path, key, limit = draw(st.sampled_from(_strings(summary)))
    text = at_path(summary, path)[key]
    at = draw(st.integers(0, len(text)))
    long = (text * (limit // len(text) + 2))[: limit + draw(st.integers(1, 50))]
    for value in ("", " ", "\n\t ", *NOT_STRINGS, long, text[:at] + "\ud800" + text[at:]):
        yield _set(copy.deepcopy(summary), (*path, key), value), _path((*path, key)), MAX


def _bad_citations(draw, summary, source):
    path = draw(st.sampled_from(_items(summary) + _refs(summary)))
    ids = at_path(summary, path)["source_event_ids"]
    where = _path((*path, "source_event_ids"))
    more = draw(st.lists(_outside_ids(source), min_size=9, max_size=12, unique=True))
    repeated = [*ids, draw(st.sampled_from(ids))] if len(ids) < 8 else [*ids[:7], ids[0]]
    for value in ([], *NOT_LISTS, ids[0], more, repeated):
        yield _set(copy.deepcopy(summary), (*path, "source_event_ids"), value), where, MAX
    at = draw(st.integers(0, len(ids) - 1))
    for wrong in (*NOT_STRINGS, draw(_outside_ids(source))):
        broken = copy.deepcopy(summary)
        at_path(broken, path)["source_event_ids"][at] = wrong
        yield broken, f"{where}[{at}]", MAX


def _request_for_another_event(draw, summary, source):
    path = draw(st.sampled_from(_requests(summary, "event_id")))
    users = set(source.user_texts) | source.lineage_user_ids
    others = sorted(source.event_ids - users)  # the range's model and tool events, at least
    for value in (draw(st.sampled_from(others)), draw(_outside_ids(source)), *NOT_STRINGS):
        broken = _set(copy.deepcopy(summary), (*path, "event_id"), value)
        yield broken, _path((*path, "event_id")), MAX


def _misquote(draw, summary, source):
    """An excerpt that is not the user's exact words (of the range or of the lineage)."""
    path = draw(st.sampled_from(_requests(summary, "excerpt")))
    excerpt = at_path(summary, path)["excerpt"]
    at = draw(st.integers(0, len(excerpt)))
    changed = [excerpt[:at] + marker + excerpt[at:] for marker in ("☃", "\u00a0", "«")]
    changed += [excerpt + "…", excerpt.replace(" ", "  ", 1), excerpt.upper()]
    for value in changed:
        if value != excerpt:
            yield (
                _set(copy.deepcopy(summary), (*path, "excerpt"), value),
                _path((*path, "excerpt")),
                MAX,
            )


def _wrong_omission(draw, summary, source):
    path = draw(st.sampled_from(_requests(summary, "omitted")))
    for value in ("password", "", "Secret", True, None):
        yield (
            _set(copy.deepcopy(summary), (*path, "omitted"), value),
            _path((*path, "omitted")),
            MAX,
        )


def _quoted_credential(draw, summary, source):
    """A request holding a credential quoted instead of recorded as an omission."""
    paths = [
        p
        for p in _requests(summary, "omitted")
        if at_path(summary, p)["event_id"] in source.user_texts
    ]
    path = draw(st.sampled_from(paths))
    event_id = at_path(summary, path)["event_id"]
    text = source.user_texts[event_id]
    at = text.index(next(c for c in CREDENTIALS if c in text))
    excerpt = text[draw(st.integers(0, at)) :]
    broken = _set(copy.deepcopy(summary), path, {"event_id": event_id, "excerpt": excerpt})
    yield broken, _path((*path, "excerpt")), MAX


def _credential_in_free_text(draw, summary, source):
    """An entry or an artifact reference quoting a credential (a model's or a tool's words
    copied into the summary)."""
    paths = [(p, "text") for p in _items(summary)] + [(p, "ref") for p in _refs(summary)]
    path, key = draw(st.sampled_from(paths))
    text = at_path(summary, path)[key]
    for credential in CREDENTIALS:
        value = f"{text[:100]} {credential}"
        yield _set(copy.deepcopy(summary), (*path, key), value), _path((*path, key)), MAX


def _repeated_entry(draw, summary, source):
    rng = random.Random(draw(SEEDS))
    for path in [("user_requests",), *{p[:-1] for p in _items(summary) if len(p) > 1}]:
        broken = copy.deepcopy(summary)
        entries = at_path(broken, path)
        twin = copy.deepcopy(rng.choice(entries))
        if "source_event_ids" in twin:
            twin["source_event_ids"] = citations(rng, source)  # the same text is enough
        limit = MAX_USER_REQUESTS if path == ("user_requests",) else MAX_ITEMS
        if len(entries) >= limit:
            entries.remove(
                next(e for e in entries if e != twin and e.get("text") != twin.get("text"))
            )
        entries.insert(rng.randint(0, len(entries)), twin)
        same = [
            i
            for i, e in enumerate(entries)
            if e == twin or ("text" in e and e["text"] == twin["text"])
        ]
        yield broken, _path((*path, same[1])), MAX


def _wrong_tools(draw, summary, source):
    tools = summary["tools"]
    unknown = draw(st.text(max_size=12).filter(lambda t: t not in source.tool_names))
    at = draw(st.integers(0, len(tools) - 1))
    changed = [tools[:at] + tools[at + 1 :], [*tools, unknown], [*tools, tools[at]]]
    changed += [[*tools, value] for value in NOT_STRINGS]
    for value in changed:
        yield {**summary, "tools": value}, "summary.tools", MAX


def _wrong_coverage(draw, summary, source):
    for key in ("first_seq", "last_seq"):
        value = summary["coverage"][key]
        for wrong in (value - 1, value + 1, str(value), float(value), None, [value], value == 1):
            if wrong is not True or value == 1:
                coverage = {**summary["coverage"], key: wrong}
                yield {**summary, "coverage": coverage}, "summary.coverage", MAX


def _over_the_byte_limit(draw, summary, source):
    size = canonical_size(summary)
    yield summary, None, size - draw(st.integers(1, size - 1))


MUTATIONS = {
    f.__name__.strip("_").replace("_", " "): f
    for f in (
        _unknown_top_field,
        _unknown_nested_field,
        _missing_top_field,
        _missing_nested_field,
        _not_an_object,
        _wrong_version,
        _wrong_language,
        _wrong_objective,
        _not_a_list,
        _too_many_entries,
        _bad_free_text,
        _bad_citations,
        _request_for_another_event,
        _misquote,
        _wrong_omission,
        _quoted_credential,
        _credential_in_free_text,
        _repeated_entry,
        _wrong_tools,
        _wrong_coverage,
        _over_the_byte_limit,
    )
}


@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
@hypothesis_settings(max_examples=25)
@given(case=valid_summaries(), data=st.data())
def test_every_rule_breaking_mutation_of_a_valid_summary_is_rejected(mutation, case, data):
    """Each rule of the validator, broken alone in a valid summary, is reported where it
    breaks; the summary as generated is accepted."""
    summary, source = case
    assert validate_summary(copy.deepcopy(summary), source, MAX) == summary
    for broken, where, max_bytes in MUTATIONS[mutation](data.draw, summary, source):
        with pytest.raises((SummaryInvalid, SummaryTooLarge)) as error:
            validate_summary(broken, source, max_bytes)
        if where is None:
            assert isinstance(error.value, SummaryTooLarge)
        else:
            assert isinstance(error.value, SummaryInvalid), error.value
            assert error.value.path == where, (broken, error.value)
