"""The rule-based extractor: facts from what a user says about themselves, with no model.
Pure: no Django, no database. It answers what a model answers (``memory.proposals``), so
the same check decides what of it is applied.

What it keeps, whole: from the user's turns only, sentence by sentence, a sentence that is
not a question, a hypothetical or a joke (``_NOT_A_FACT``: a question mark, "if", "would",
"imagine", "suppose", "just kidding", laughter...) and matches one of ``RULES``:

- identity: ``identity.name`` (my name is / call me), ``identity.home`` (I live in / I moved
  to), ``identity.work`` (I work as, at, for), ``identity.age`` (I am N years old),
  ``identity.birthday`` (my birthday is);
- preferences: ``preference.favourite_<thing>`` (my favourite <thing> is), ``preference.diet``
  (I am vegetarian, vegan, pescatarian), and without a key what the user likes, loves,
  prefers, enjoys or dislikes;
- health: ``health.allergy`` (I am allergic to);
- plans, without a key: what the user is going, planning, flying or travelling to do, or
  will do, with "today", "tomorrow", "tonight", "yesterday", "next week" and "next month"
  resolved against the turn's time ("on 2026-06-02").

A keyed fact whose key a candidate holds with the same text is no change (``noop``); with
other text it updates that candidate; else it is added. Of two sentences of one batch about
one key, the later is kept.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta

from memory.proposals import Candidate
from memory.similarity import normalised

# Changes whenever a rule does; kept with every extraction run.
VERSION = "rules.v1"

_SENTENCE = re.compile(r"[^.!?\n]+[.!?]?")
# Clauses of a sentence that each say something of their own: "I live in Porto and I love
# trams" is two.
_CLAUSE = re.compile(r"\s*(?:,\s*)?\b(?:and|but|so)\s+(?=(?:i|my)\b)", re.IGNORECASE)
_VALUE = r"(?P<v>[^,;:()]{1,80}?)"
_END = r"\s*(?:[,;:(]|$)"
_NOT_A_FACT = re.compile(
    r"\?|\b(?:if|would|could|might|imagine|suppose|pretend|hypothetically|wish|"
    r"kidding|jk|joking|lol|lmao|haha\w*|rofl)\b",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Rule:
    name: str
    pattern: re.Pattern
    key: str | None  # "{thing}": the slug of the pattern's ``thing``
    content: str  # "{v}" the value, "{thing}" the thing


def _rule(name: str, pattern: str, key: str | None, content: str) -> Rule:
    return Rule(name, re.compile(pattern + _END, re.IGNORECASE), key, content)


RULES = (
    _rule("name", rf"\b(?:my name is|call me) {_VALUE}", "identity.name", "Name: {v}"),
    _rule(
        "home",
        rf"\bi(?: now| currently)? (?:live|am living|'m living) in {_VALUE}",
        "identity.home",
        "Lives in {v}",
    ),
    _rule(
        "moved",
        rf"\bi(?: have|'ve)?(?: just| recently)? moved to {_VALUE}",
        "identity.home",
        "Lives in {v}",
    ),
    _rule(
        "work",
        rf"\bi(?: now)? work (?P<how>as|at|for) {_VALUE}",
        "identity.work",
        "Works {how} {v}",
    ),
    _rule("age", r"\bi(?: am|'m) (?P<v>\d{1,3}) years? old", "identity.age", "Is {v} years old"),
    _rule("birthday", rf"\bmy birthday is {_VALUE}", "identity.birthday", "Birthday: {v}"),
    _rule(
        "favourite",
        rf"\bmy favou?rite (?P<thing>[a-z][a-z ]{{0,30}}?) is {_VALUE}",
        "preference.favourite_{thing}",
        "Favourite {thing}: {v}",
    ),
    _rule(
        "diet",
        r"\bi(?: am|'m)(?: a)? (?P<v>vegetarian|vegan|pescatarian)",
        "preference.diet",
        "Is {v}",
    ),
    _rule("allergy", rf"\bi(?: am|'m) allergic to {_VALUE}", "health.allergy", "Allergic to {v}"),
    _rule(
        "dislike",
        rf"\bi (?:really )?(?:don't like|do not like|dislike|hate|can't stand) {_VALUE}",
        None,
        "Dislikes {v}",
    ),
    _rule(
        "like",
        rf"\bi (?:really |also )?(?P<how>prefer|like|love|enjoy) {_VALUE}",
        None,
        "{How} {v}",
    ),
    _rule(
        "plan",
        rf"\bi(?: am|'m)? (?P<how>going|planning|flying|travell?ing|heading) to {_VALUE}",
        None,
        "Is {how} to {v}",
    ),
    _rule("will", rf"\bi(?: will|'ll) {_VALUE}", None, "Plans to {v}"),
)

# When a keyed fact became true, said after its value: not part of the value.
_SINCE = re.compile(
    r"\s+(?:(?:last|this) (?:year|month|week|spring|summer|autumn|fall|winter)|recently|"
    r"yesterday|today|(?:a|one|two|three|few) (?:days?|weeks?|months?|years?) ago|"
    r"(?:in|since) (?:\d{4}|january|february|march|april|may|june|july|august|september|"
    r"october|november|december)\b.*)$",
    re.IGNORECASE,
)
_HOW = {"prefer": "Prefers", "like": "Likes", "love": "Loves", "enjoy": "Enjoys"}
_DAYS = {"today": 0, "tonight": 0, "tomorrow": 1, "yesterday": -1, "next week": 7}
_WHEN = re.compile(r"\b(today|tonight|tomorrow|yesterday|next week|next month)\b", re.IGNORECASE)


def _slug(thing: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", thing.lower()).strip("_")[:40] or "thing"


def _dated(value: str, at: datetime | None) -> str:
    """``value`` with a relative day resolved against ``at`` (the turn's time)."""
    match = _WHEN.search(value)
    if match is None or at is None:
        return value
    word = match.group(1).lower()
    if word == "next month":
        month = at.month % 12 + 1
        day = at.replace(year=at.year + (at.month == 12), month=month, day=1)
        return f"{value} (in {day:%Y-%m})"
    return f"{value} (on {(at + timedelta(days=_DAYS[word])):%Y-%m-%d})"


def _facts(text: str, at: datetime | None):
    """(rule, key or None, content) for each fact a user's text states."""
    for sentence in _SENTENCE.findall(text):
        if _NOT_A_FACT.search(sentence):
            continue
        for clause in _CLAUSE.split(sentence.strip().rstrip(".!")):
            yield from _clause_facts(clause, at)


def _clause_facts(clause: str, at: datetime | None):
    """The first rule's fact of one clause, if any."""
    for rule in RULES:
        match = rule.pattern.search(clause)
        if match is None:
            continue
        found = match.groupdict()
        value = found["v"].strip()
        if rule.key is not None:  # a keyed value is the value alone: "Lisbon", not "Lisbon in May"
            value = _SINCE.sub("", value).strip()
        if not value:
            return
        thing = found.get("thing") or ""
        how = found.get("how") or ""
        content = rule.content.format(
            v=value, thing=thing.strip(), how=how.lower(), How=_HOW.get(how.lower(), how)
        )
        if rule.key is None:
            content = _dated(content, at)
        key = rule.key.format(thing=_slug(thing)) if rule.key else None
        yield rule.name, key, content
        return


def propose(turns: list[dict], candidates: list[Candidate]) -> dict:
    """The operations for ``turns`` (``event_id``, ``role``, ``text``, ``timestamp``: a
    datetime or None) over ``candidates``, as an extractor's answer."""
    keyed: dict[str, dict] = {}
    unkeyed: list[dict] = []
    by_key = {c.key: c for c in candidates if c.key is not None}
    for turn in turns:
        if turn.get("role") != "user":
            continue
        for name, key, content in _facts(turn["text"], turn.get("timestamp")):
            reason = f"rule {name}"
            sources = [turn["event_id"]]
            if key is None:
                unkeyed.append(
                    {"op": "add", "content": content, "reason": reason, "source_event_ids": sources}
                )
                continue
            keyed.pop(key, None)  # the later statement of a key is the one kept
            held = by_key.get(key)
            if held is not None and normalised(held.content) == normalised(content):
                keyed[key] = {"op": "noop", "reason": f"{reason}: already known"}
            elif held is not None:
                keyed[key] = {
                    "op": "update",
                    "candidate": held.number,
                    "content": content,
                    "reason": reason,
                    "source_event_ids": sources,
                }
            else:
                keyed[key] = {
                    "op": "add",
                    "content": content,
                    "key": key,
                    "reason": reason,
                    "source_event_ids": sources,
                }
    return {"operations": [*keyed.values(), *unkeyed]}
