"""An offline evaluation of extractors: scripted conversations with gold operations, run
through the server's own check (``memory.proposals.check``) over an in-memory scope, and
scored. Pure: no database, no network; ``tests/memory/test_extraction_suite.py`` runs it in
``make test`` and ``bench/extraction_bench.py`` publishes its figures.

A conversation is one user's sessions, in order; each session's turns are shown to the
extractor with the scope's live memories as numbered candidates (as the service shows
them), its answer is checked whole (a refused answer changes nothing, as in the service)
and applied to the scope. Its gold is, per session, the operations a careful reader would
make: ``add``/``update`` with the words the memory must hold (``value``: every word of it
in the content, case-folded), ``retire`` of a memory by those words. Categories:

- ``preference_change``: a preference stated, then changed (an update, never a second
  live value);
- ``stated_once``: identity facts said once (name, home, work, age, birthday, diet,
  allergy, favourites, likes);
- ``correction``: a fact corrected in the same or the next session;
- ``not_a_fact``: jokes, hypotheticals, questions, wishes, quotes (no operation);
- ``two_users``: two users' sessions interleaved; each scope must hold its own user's
  facts only (``mixed`` counts another user's value found in a scope);
- ``dates``: plans with relative days, resolved against the turn's time;
- ``beyond_rules``: facts stated in ways no rule of the offline extractor reads (its
  recall is honest about them).

Scores: operations' precision and recall (a predicted operation matches an unmatched gold
operation of the same kind whose words it holds), wrong retirements (an ``update`` or
``retire`` that no gold operation asks for), duplicates (live memories of a scope with
the same normalised text, or near-duplicates, ``memory.similarity``), mixed facts, and
refused answers.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from itertools import count

from ctxadmin.credentials import looks_like_secret
from memory import rule_extractor
from memory.proposals import Candidate, Limits, ProposalError, check
from memory.similarity import near_words, normalised, words

LIMITS = Limits(32 * 1024, looks_like_secret)
START = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


@dataclass
class Session:
    turns: list[dict]
    gold: list[dict]


@dataclass
class Conversation:
    name: str
    category: str
    user: str
    sessions: list[Session]


@dataclass
class Memory:
    id: str
    content: str
    key: str | None


@dataclass
class Scope:
    live: list[Memory] = field(default_factory=list)
    ids: count = field(default_factory=lambda: count(1))

    def candidates(self) -> list[Candidate]:
        return [
            Candidate(n, memory.id, memory.content, memory.key)
            for n, memory in enumerate(self.live, start=1)
        ]


def _turns(user: str, lines: list[str], day: int) -> list[dict]:
    at = START + timedelta(days=day)
    turns = []
    for n, line in enumerate(lines):
        role = "user" if n % 2 == 0 else "model"
        turns.append(
            {
                "event_id": f"{user}-d{day}-{n}",
                "author": user if role == "user" else "agent",
                "role": role,
                "text": line,
                "timestamp": at + timedelta(minutes=n),
            }
        )
    return turns


def _op(op: str, value: str) -> dict:
    return {"op": op, "value": value}


PEOPLE = ["ana", "bruno", "chen", "dara", "elif", "femi", "gita", "hugo", "ines", "jun"]
CITIES = ["Porto", "Lisbon", "Madrid", "Berlin", "Oslo", "Kyoto", "Lima", "Accra", "Quito", "Turin"]
THINGS = [
    ("colour", "blue", "green"),
    ("drink", "coffee", "tea"),
    ("sport", "tennis", "climbing"),
    ("season", "spring", "autumn"),
    ("cuisine", "thai", "italian"),
]


def conversations() -> list[Conversation]:
    """The suite: at least 50 conversations, generated the same way every time."""
    suite: list[Conversation] = []
    ack = "Got it, thanks for telling me."
    for n, (thing, before, after) in enumerate(THINGS * 2):
        user = f"{PEOPLE[n]}-pref"
        first = Session(
            _turns(user, [f"My favourite {thing} is {before}.", ack], 0),
            [_op("add", before)],
        )
        second = Session(
            _turns(user, [f"These days my favourite {thing} is {after}.", ack], 5 + n),
            [_op("update", after)],
        )
        suite.append(Conversation(f"preference-{n}", "preference_change", user, [first, second]))
    once = [
        ("My name is {name}.", "{name}"),
        ("I live in {city}.", "{city}"),
        ("I work as a nurse.", "nurse"),
        ("I am 34 years old.", "34"),
        ("My birthday is 12 May.", "12 may"),
        ("I am vegetarian.", "vegetarian"),
        ("I am allergic to peanuts.", "peanuts"),
        ("I love hiking in the mountains.", "hiking mountains"),
        ("I don't like horror films.", "horror films"),
        ("I enjoy baking sourdough bread.", "baking sourdough"),
    ]
    for n, (line, value) in enumerate(once):
        user = f"{PEOPLE[n]}-once"
        name, city = PEOPLE[n].capitalize(), CITIES[n]
        text = line.format(name=name, city=city)
        session = Session(
            _turns(user, [f"Hello! {text}", ack], 0),
            [_op("add", value.format(name=name, city=city).lower())],
        )
        suite.append(Conversation(f"once-{n}", "stated_once", user, [session]))
    for n in range(6):
        user = f"{PEOPLE[n]}-fix"
        wrong, right = CITIES[n], CITIES[n + 4]
        if n % 2 == 0:  # corrected in the same session
            sessions = [
                Session(
                    _turns(
                        user,
                        [f"I live in {wrong}.", "Noted.", f"Sorry, I moved to {right}.", ack],
                        0,
                    ),
                    [_op("add", right)],
                )
            ]
        else:  # corrected in the next one
            sessions = [
                Session(_turns(user, [f"I live in {wrong}.", "Noted."], 0), [_op("add", wrong)]),
                Session(
                    _turns(user, [f"Correction: I moved to {right}.", ack], 3),
                    [_op("update", right)],
                ),
            ]
        suite.append(Conversation(f"correction-{n}", "correction", user, sessions))
    not_facts = [
        "If I were rich I would live in Monaco.",
        "Imagine my name was Zorro, haha!",
        "Do you think I should move to Paris?",
        "I wish I lived in Hawaii.",
        "Just kidding, my favourite colour is not really purple lol.",
        "My friend always says: I live in a yellow submarine.",
        "Would I like sushi? No idea.",
        "Suppose I am allergic to cats, what then?",
        "Lol I am 200 years old.",
        "Hypothetically, I work as an astronaut.",
    ]
    for n, line in enumerate(not_facts):
        user = f"{PEOPLE[n]}-joke"
        session = Session(_turns(user, [line, "Ha, fun thought!"], 0), [])
        suite.append(Conversation(f"not-a-fact-{n}", "not_a_fact", user, [session]))
    for n in range(5):
        first, second = f"{PEOPLE[n]}-pair", f"{PEOPLE[n + 5]}-pair"
        for user, city, other in (
            (first, CITIES[n], CITIES[n + 5]),
            (second, CITIES[n + 5], CITIES[n]),
        ):
            session = Session(_turns(user, [f"I live in {city}.", ack], n), [_op("add", city)])
            conv = Conversation(f"two-users-{n}-{user}", "two_users", user, [session])
            conv.other_value = other.lower()  # type: ignore[attr-defined]
            suite.append(conv)
    plans = [
        ("I am flying to Tokyo tomorrow.", "tokyo 2026-03-03"),
        ("I'm going to the dentist tomorrow.", "dentist 2026-03-03"),
        ("I'm travelling to Rome next week.", "rome 2026-03-09"),
        ("I will start a new job next month.", "new job 2026-04"),
        ("I'm heading to the lake today.", "lake 2026-03-02"),
    ]
    for n, (line, value) in enumerate(plans):
        user = f"{PEOPLE[n]}-date"
        session = Session(_turns(user, [line, ack], 0), [_op("add", value)])
        suite.append(Conversation(f"dates-{n}", "dates", user, [session]))
    beyond = [
        ("My sister Maria lives in Rome.", "maria rome"),
        ("We adopted a dog called Biscuit.", "dog biscuit"),
        ("Since 2019 I have been teaching maths.", "teaching maths"),
        ("Our wedding anniversary is on June 3.", "anniversary june 3"),
    ]
    for n, (line, value) in enumerate(beyond):
        user = f"{PEOPLE[n]}-beyond"
        session = Session(_turns(user, [line, ack], 0), [_op("add", value)])
        suite.append(Conversation(f"beyond-rules-{n}", "beyond_rules", user, [session]))
    return suite


Extractor = Callable[[list[dict], list[Candidate], Conversation], object]


def rules(turns: list[dict], candidates: list[Candidate], _conv: Conversation) -> object:
    """The offline extractor, as the service calls it."""
    return rule_extractor.propose(turns, candidates)


def _holds(content: str, value: str) -> bool:
    return set(words(value)) <= set(words(content))


def _apply(scope: Scope, operations) -> list[tuple[str, str, Memory | None]]:
    """Apply checked operations to the in-memory scope as the service does: a keyed add
    supersedes its key's live version. (kind, content, the memory it replaced or retired)."""
    applied = []
    for operation in operations:
        if operation.op == "noop":
            continue
        target = None
        if operation.candidate is not None:
            target = next(m for m in scope.live if m.id == operation.candidate.memory_id)
        elif operation.key is not None:
            target = next((m for m in scope.live if m.key == operation.key), None)
        if target is not None and operation.op in ("update", "retire", "add"):
            scope.live.remove(target)
        if operation.op == "retire":
            applied.append(("retire", target.content, target))
            continue
        same = next(
            (m for m in scope.live if normalised(m.content) == normalised(operation.content)),
            None,
        )
        if same is None:
            scope.live.append(Memory(str(next(scope.ids)), operation.content, operation.key))
        kind = "update" if operation.op == "update" or target is not None else "add"
        applied.append((kind, operation.content, target))
    return applied


@dataclass
class Score:
    predicted: int = 0
    gold: int = 0
    matched: int = 0
    wrong_retirements: int = 0
    duplicates: int = 0
    mixed: int = 0
    refused: int = 0
    by_category: dict = field(default_factory=dict)

    def figures(self) -> dict:
        precision = self.matched / self.predicted if self.predicted else 1.0
        recall = self.matched / self.gold if self.gold else 1.0
        return {
            "operations_predicted": self.predicted,
            "operations_gold": self.gold,
            "precision": round(precision, 3),
            "recall": round(recall, 3),
            "wrong_retirements": self.wrong_retirements,
            "duplicates": self.duplicates,
            "mixed": self.mixed,
            "refused_answers": self.refused,
        }


def _duplicates(scope: Scope) -> int:
    found = 0
    for i, first in enumerate(scope.live):
        for second in scope.live[i + 1 :]:
            same = normalised(first.content) == normalised(second.content)
            if same or near_words(words(first.content), words(second.content)):
                found += 1
    return found


def evaluate(extractor: Extractor, suite: list[Conversation] | None = None) -> Score:
    """Run every conversation through ``extractor`` and score it."""
    score = Score()
    for conv in suite if suite is not None else conversations():
        scope = Scope()
        category = score.by_category.setdefault(conv.category, Score())
        for session in conv.sessions:
            candidates = scope.candidates()
            answer = extractor(session.turns, candidates, conv)
            try:
                operations = check(
                    answer, candidates, [t["event_id"] for t in session.turns], LIMITS
                )
            except ProposalError:
                score.refused += 1
                category.refused += 1
                operations = []
            gold_left = list(session.gold)
            applied = _apply(scope, operations)
            for tally in (score, category):
                tally.predicted += len(applied)
                tally.gold += len(session.gold)
            for kind, content, target in applied:
                match = next(
                    (g for g in gold_left if g["op"] == kind and _holds(content, g["value"])),
                    None,
                )
                if match is not None:
                    gold_left.remove(match)
                    score.matched += 1
                    category.matched += 1
                elif kind in ("update", "retire") and target is not None:
                    score.wrong_retirements += 1
                    category.wrong_retirements += 1
        dupes = _duplicates(scope)
        other = getattr(conv, "other_value", None)
        mixed = sum(1 for m in scope.live if other and _holds(m.content, other))
        for tally in (score, category):
            tally.duplicates += dupes
            tally.mixed += mixed
    return score


def scripted(answers: dict[str, list[object]]) -> Extractor:
    """An extractor that replays scripted answers, per conversation name, session by
    session (a model's answers, recorded or written by hand)."""
    replay = {name: iter(values) for name, values in answers.items()}

    def answer(turns, candidates, conv):
        return next(replay[conv.name])

    return answer


def gold_answers(suite: list[Conversation] | None = None) -> dict[str, list[object]]:
    """Answers a perfect model would give, written from the gold (for the scorer's own
    check, and as the base of the hostile replays)."""
    answers: dict[str, list[object]] = {}
    for conv in suite if suite is not None else conversations():
        replies = []
        shown: list[tuple[int, str]] = []  # (number, value) of the live memories, as shown
        for session in conv.sessions:
            operations = []
            source = [session.turns[0]["event_id"]]
            for gold in session.gold:
                content = f"The user: {gold['value']}"
                if gold["op"] == "update" and shown:
                    number = shown[-1][0]
                    operations.append(
                        {
                            "op": "update",
                            "candidate": number,
                            "content": content,
                            "reason": "changed",
                            "source_event_ids": source,
                        }
                    )
                else:
                    operations.append(
                        {
                            "op": "add",
                            "content": content,
                            "reason": "stated",
                            "source_event_ids": source,
                        }
                    )
            replies.append({"operations": operations})
            shown = [(1, gold["value"]) for gold in session.gold] or shown
        answers[conv.name] = replies
    return answers


def hostile_answers(suite: list[Conversation] | None = None) -> dict[str, list[object]]:
    """Answers no model should give and the check must refuse: not JSON, truncated, a
    candidate never shown, another user's event, a credential, an unknown field, a delete."""
    bad = [
        "Sure! Here is what I would remember.",
        '{"operations": [{"op": "add", "content": "The user',
        {
            "operations": [
                {"op": "retire", "candidate": 42, "reason": "x", "source_event_ids": ["e"]}
            ]
        },
        {
            "operations": [
                {"op": "add", "content": "x", "reason": "x", "source_event_ids": ["elsewhere-1"]}
            ]
        },
        {
            "operations": [
                {
                    "op": "add",
                    "content": "password=hunter2hunter2",
                    "reason": "x",
                    "source_event_ids": ["e"],
                }
            ]
        },
        {
            "operations": [
                {"op": "add", "content": "x", "reason": "x", "source_event_ids": ["e"], "id": 1}
            ]
        },
        {"operations": [{"op": "delete", "candidate": 1, "reason": "clean up"}]},
        {"operations": [], "note": "all good"},
    ]
    answers: dict[str, list[object]] = {}
    turn = count()
    for conv in suite if suite is not None else conversations():
        replies = []
        for session in conv.sessions:
            reply = bad[next(turn) % len(bad)]
            if isinstance(reply, dict):  # name a turn of this session where one is wanted
                reply = json.loads(
                    json.dumps(reply).replace('"e"', f'"{session.turns[0]["event_id"]}"')
                )
            else:
                reply = reply  # text: not JSON, as a model's reply would stay
            replies.append(reply)
        answers[conv.name] = replies
    return answers
