"""The point-in-time suite: scripted histories of keyed memories with deterministic answers
for reads at a valid time (``as_of``) and a record time (``known_at``), out-of-order
arrivals, rollbacks and deletes, run through the HTTP API.

Each scenario is a list of steps run against its own users' scopes:

- ``Add(name, content, key=..., valid_from=..., user=...)`` adds a memory and remembers
  its answer (id, ``recorded_at``) under ``name``;
- ``Rollback(name, target)`` rolls back to the version ``target`` (201: a new version
  named ``name``; 200: the live version already held that content; 409: refused);
- ``Delete(target)`` deletes a version;
- ``Listed(contents, as_of=..., known_at=..., user=...)`` expects the list of the user's
  memories read at (``as_of``, ``known_at``) to hold exactly ``contents``;
- ``Found(contents, query, ...)`` the same through hybrid search;
- ``History(target, contents)`` expects the history of ``target``, oldest valid first.

A record time is a reference to an earlier step, ``After("x")`` (the instant ``x`` was
recorded) or ``Before("x")`` (one microsecond earlier), since record time is the server's
clock, never the client's. Valid times are fixed dates in the past or the future of the
run. The score is the share of expectations met; every scenario must pass (100%).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

# (method, path, body or None, query params or None) -> (status, answer)
Call = Callable[[str, str, dict | None, dict | None], tuple[int, dict]]

JAN, MAR, MAY, JUN, JUL, SEP, OCT = (
    "2026-01-01T00:00:00Z",
    "2026-03-01T00:00:00Z",
    "2026-05-01T00:00:00Z",
    "2026-06-01T00:00:00Z",
    "2026-07-01T00:00:00Z",
    "2026-09-01T00:00:00Z",
    "2026-10-01T00:00:00Z",
)
BEFORE_ALL = "2025-06-01T00:00:00Z"
FUTURE = "2099-03-01T00:00:00Z"
LATER_FUTURE = "2099-04-01T00:00:00Z"
FEB, APR, JUN15, AUG = (
    "2026-02-01T00:00:00Z",
    "2026-04-01T00:00:00Z",
    "2026-06-15T00:00:00Z",
    "2026-08-01T00:00:00Z",
)
SEAT = "preference.seat"


@dataclass(frozen=True)
class After:
    step: str


@dataclass(frozen=True)
class Before:
    step: str


@dataclass(frozen=True)
class Add:
    name: str
    content: str
    key: str | None = SEAT
    valid_from: str | None = None
    user: str = "alice"
    status: int = 201


@dataclass(frozen=True)
class Rollback:
    name: str
    target: str
    status: int = 201


@dataclass(frozen=True)
class Delete:
    target: str


@dataclass(frozen=True)
class Listed:
    contents: tuple[str, ...]
    as_of: str | None = None
    known_at: After | Before | None = None
    user: str = "alice"


@dataclass(frozen=True)
class Found:
    contents: tuple[str, ...]
    query: str
    as_of: str | None = None
    known_at: After | Before | None = None
    user: str = "alice"


@dataclass(frozen=True)
class History:
    target: str
    contents: tuple[str, ...]


@dataclass
class Scenario:
    name: str
    steps: list
    tags: tuple[str, ...] = field(default_factory=tuple)


def _s(name: str, *steps, tags: tuple[str, ...] = ()) -> Scenario:
    return Scenario(name, list(steps), tags)


SCENARIOS: list[Scenario] = [
    _s(
        "a newer fact supersedes the live one",
        Add("a", "aisle seat", valid_from=JAN),
        Add("w", "window seat", valid_from=JUN),
        Listed(("window seat",)),
        Listed(("aisle seat",), as_of=MAR),
        Listed((), as_of=BEFORE_ALL),
    ),
    _s(
        "an older fact arriving later goes into the past",
        Add("w", "window seat", valid_from=JUN),
        Add("a", "aisle seat", valid_from=JAN),
        Listed(("window seat",)),
        Listed(("aisle seat",), as_of=MAR),
        History("w", ("aisle seat", "window seat")),
        tags=("out_of_order",),
    ),
    _s(
        "before an older fact arrived, its span was unknown",
        Add("w", "window seat", valid_from=JUN),
        Add("a", "aisle seat", valid_from=JAN),
        Listed((), as_of=MAR, known_at=Before("a")),
        Listed(("aisle seat",), as_of=MAR, known_at=After("a")),
        Listed(("window seat",), known_at=Before("a")),
        tags=("out_of_order", "known_at"),
    ),
    _s(
        "as known before a supersession, the old value was current",
        Add("a", "aisle seat", valid_from=JAN),
        Add("w", "window seat", valid_from=JUN),
        Listed(("aisle seat",), known_at=Before("w")),
        Listed(("window seat",), known_at=After("w")),
        tags=("known_at",),
    ),
    _s(
        "a late middle version splits the history",
        Add("a", "seat A", valid_from=JAN),
        Add("c", "seat C", valid_from=SEP),
        Add("b", "seat B", valid_from=MAY),
        Listed(("seat A",), as_of=FEB),
        Listed(("seat B",), as_of=JUN),
        Listed(("seat C",), as_of=OCT),
        Listed(("seat C",)),
        History("a", ("seat A", "seat B", "seat C")),
        tags=("out_of_order",),
    ),
    _s(
        "a rollback restores an old value as a new version",
        Add("a", "aisle seat", valid_from=JAN),
        Add("w", "window seat", valid_from=JUN),
        Rollback("r", "a"),
        Listed(("aisle seat",)),
        Listed(("window seat",), known_at=Before("r")),
        History("w", ("aisle seat", "window seat", "aisle seat")),
        tags=("rollback",),
    ),
    _s(
        "a closed version cut short later kept its end for earlier readers",
        Add("a", "seat A", valid_from=JAN),
        Add("c", "seat C", valid_from=SEP),
        Add("b", "seat B", valid_from=MAY),
        Listed(("seat A",), as_of=JUN, known_at=Before("b")),
        Listed(("seat B",), as_of=JUN, known_at=After("b")),
        Listed(("seat A",), as_of=APR, known_at=After("b")),
        Listed(("seat C",), as_of=OCT, known_at=Before("b")),
        tags=("out_of_order", "known_at"),
    ),
    _s(
        "a version cut short twice, each reader sees the end known then",
        Add("a", "seat A", valid_from=JAN),
        Add("d", "seat D", valid_from=OCT),
        Add("c", "seat C", valid_from=AUG),
        Add("b", "seat B", valid_from=MAY),
        Listed(("seat A",), as_of=SEP, known_at=Before("c")),
        Listed(("seat C",), as_of=SEP, known_at=After("c")),
        Listed(("seat A",), as_of=JUN, known_at=After("c")),
        Listed(("seat B",), as_of=JUN, known_at=After("b")),
        Listed(("seat A",), as_of=MAR, known_at=After("b")),
        History("a", ("seat A", "seat B", "seat C", "seat D")),
        tags=("out_of_order", "known_at"),
    ),
    _s(
        "a rollback keeps the past as it was",
        Add("a", "aisle seat", valid_from=JAN),
        Add("w", "window seat", valid_from=JUN),
        Rollback("r", "a"),
        Listed(("window seat",), as_of=JUL),
        Listed(("aisle seat",), as_of=MAR),
        tags=("rollback",),
    ),
    _s(
        "a rollback to the middle version",
        Add("a", "seat A", valid_from=JAN),
        Add("b", "seat B", valid_from=MAY),
        Add("c", "seat C", valid_from=SEP),
        Rollback("r", "b"),
        Listed(("seat B",)),
        History("c", ("seat A", "seat B", "seat C", "seat B")),
        tags=("rollback",),
    ),
    _s(
        "a rollback to what the live version already says adds nothing",
        Add("a", "aisle seat", valid_from=JAN),
        Add("w", "window seat", valid_from=JUN),
        Add("a2", "aisle seat", valid_from=SEP),
        Rollback("r", "a", status=200),
        History("a2", ("aisle seat", "window seat", "aisle seat")),
        tags=("rollback",),
    ),
    _s(
        "the live version cannot be rolled back to",
        Add("a", "aisle seat", valid_from=JAN),
        Add("w", "window seat", valid_from=JUN),
        Rollback("r", "w", status=409),
        Listed(("window seat",)),
        tags=("rollback",),
    ),
    _s(
        "a memory without a key has no versions to roll back to",
        Add("n", "likes trains", key=None, valid_from=JAN),
        Rollback("r", "n", status=409),
        History("n", ("likes trains",)),
        tags=("rollback",),
    ),
    _s(
        "different keys never supersede each other",
        Add("s", "aisle seat", valid_from=JAN),
        Add("m", "vegetarian meal", key="preference.meal", valid_from=JUN),
        Listed(("aisle seat", "vegetarian meal")),
        Listed(("aisle seat",), as_of=MAR),
    ),
    _s(
        "a key and a longer key are two facts",
        Add("s", "aisle seat", valid_from=JAN),
        Add("x", "extra legroom", key="preference.seat.legroom", valid_from=JUN),
        Listed(("aisle seat", "extra legroom")),
    ),
    _s(
        "memories without a key never supersede",
        Add("a", "Alice lives in Lisbon", key=None, valid_from=JAN),
        Add("b", "Alice lives in Porto", key=None, valid_from=JUN),
        Listed(("Alice lives in Lisbon", "Alice lives in Porto")),
        Listed(("Alice lives in Lisbon",), as_of=MAR),
    ),
    _s(
        "the same content with the live key is that version",
        Add("a", "aisle seat", valid_from=JAN),
        Add("a2", "aisle seat", valid_from=JUN, status=200),
        History("a", ("aisle seat",)),
        Listed(("aisle seat",), as_of=MAR),
    ),
    _s(
        "keys are case-folded",
        Add("a", "aisle seat", key="Preference.Seat", valid_from=JAN),
        Add("w", "window seat", key="preference.seat", valid_from=JUN),
        Listed(("window seat",)),
        History("a", ("aisle seat", "window seat")),
    ),
    _s(
        "a fact valid from the future is not yet true",
        Add("a", "aisle seat", valid_from=JAN),
        Add("w", "window seat", valid_from=FUTURE),
        Listed(("aisle seat",)),
        Listed(("window seat",), as_of=LATER_FUTURE),
        tags=("future",),
    ),
    _s(
        "an unkeyed fact valid from the future is not yet true",
        Add("t", "flies to Oslo", key=None, valid_from=FUTURE),
        Listed(()),
        Listed(("flies to Oslo",), as_of=LATER_FUTURE),
        tags=("future",),
    ),
    _s(
        "deleting the live version leaves no current version",
        Add("a", "aisle seat", valid_from=JAN),
        Add("w", "window seat", valid_from=JUN),
        Delete("w"),
        Listed(()),
        Listed(("aisle seat",), as_of=MAR),
        History("a", ("aisle seat",)),
        tags=("delete",),
    ),
    _s(
        "after a delete, the next version is placed as if it had never been",
        Add("a", "aisle seat", valid_from=JAN),
        Add("w", "window seat", valid_from=JUN),
        Delete("w"),
        Add("x", "exit row", valid_from=JUL),
        Listed(("exit row",)),
        Listed((), as_of=JUN15),
        Listed(("aisle seat",), as_of=MAR),
        tags=("delete",),
    ),
    _s(
        "deleting an old version leaves a gap in the past only",
        Add("a", "seat A", valid_from=JAN),
        Add("b", "seat B", valid_from=MAY),
        Add("c", "seat C", valid_from=SEP),
        Delete("b"),
        Listed(("seat C",)),
        Listed((), as_of=JUN),
        History("c", ("seat A", "seat C")),
        tags=("delete",),
    ),
    _s(
        "users never supersede each other",
        Add("a", "aisle seat", valid_from=JAN),
        Add("w", "window seat", valid_from=JUN, user="bob"),
        Listed(("aisle seat",)),
        Listed(("window seat",), user="bob"),
        Listed((), as_of=MAR, user="bob"),
        tags=("scope",),
    ),
    _s(
        "a read at a version's first instant sees that version",
        Add("a", "aisle seat", valid_from=JAN),
        Add("w", "window seat", valid_from=JUN),
        Listed(("window seat",), as_of=JUN),
        Listed(("aisle seat",), as_of=JAN),
    ),
    _s(
        "as known before anything was added, nothing",
        Add("a", "aisle seat", valid_from=JAN),
        Listed((), known_at=Before("a")),
        Listed(("aisle seat",), known_at=After("a")),
        tags=("known_at",),
    ),
    _s(
        "an older fact before the first version ends where the first begins",
        Add("b", "window seat", valid_from=JUN),
        Add("a", "aisle seat", valid_from=JAN),
        Listed(("aisle seat",), as_of=FEB),
        Listed(("window seat",), as_of=JUL),
        Listed((), as_of=BEFORE_ALL),
        tags=("out_of_order",),
    ),
    _s(
        "two versions valid from one instant: the later arrival holds",
        Add("a", "aisle seat", valid_from=JAN),
        Add("w", "window seat", valid_from=JAN),
        Listed(("window seat",)),
        Listed(("window seat",), as_of=JAN),
    ),
    _s(
        "the past stays readable as known now",
        Add("a", "aisle seat", valid_from=JAN),
        Add("w", "window seat", valid_from=JUN),
        Add("x", "exit row", valid_from=SEP),
        Listed(("aisle seat",), as_of=MAR),
        Listed(("window seat",), as_of=AUG),
        Listed(("exit row",), as_of=OCT),
    ),
    _s(
        "four versions arriving shuffled tile valid time",
        Add("d", "seat D", valid_from=SEP),
        Add("b", "seat B", valid_from=MAY),
        Add("a", "seat A", valid_from=JAN),
        Add("c", "seat C", valid_from=JUL),
        Listed(("seat A",), as_of=FEB),
        Listed(("seat B",), as_of=JUN),
        Listed(("seat C",), as_of=AUG),
        Listed(("seat D",)),
        History("a", ("seat A", "seat B", "seat C", "seat D")),
        tags=("out_of_order",),
    ),
    _s(
        "two keys interleaved, each with its own history",
        Add("s1", "aisle seat", valid_from=JAN),
        Add("m1", "vegan meal", key="preference.meal", valid_from=MAR),
        Add("s2", "window seat", valid_from=JUN),
        Add("m0", "any meal", key="preference.meal", valid_from=JAN),
        Listed(("window seat", "vegan meal")),
        Listed(("aisle seat", "any meal"), as_of=FEB),
        Listed(("aisle seat", "vegan meal"), as_of=APR),
        History("m1", ("any meal", "vegan meal")),
        tags=("out_of_order",),
    ),
    _s(
        "keyed and unkeyed memories side by side",
        Add("n", "Alice has a cat", key=None, valid_from=JAN),
        Add("a", "aisle seat", valid_from=JAN),
        Add("w", "window seat", valid_from=JUN),
        Listed(("Alice has a cat", "window seat")),
        Listed(("Alice has a cat", "aisle seat"), as_of=MAR),
    ),
    _s(
        "search reads at a valid time",
        Add("a", "aisle seat on flights", valid_from=JAN),
        Add("w", "window seat on flights", valid_from=JUN),
        Found(("window seat on flights",), "seat flights"),
        Found(("aisle seat on flights",), "seat flights", as_of=MAR),
        tags=("search",),
    ),
    _s(
        "search reads at a record time",
        Add("a", "aisle seat on trains", valid_from=JAN),
        Add("w", "window seat on trains", valid_from=JUN),
        Found(("aisle seat on trains",), "seat trains", known_at=Before("w")),
        Found(("window seat on trains",), "seat trains", known_at=After("w")),
        tags=("search", "known_at"),
    ),
    _s(
        "search finds the late older fact in the past only",
        Add("w", "window seat by the wing", valid_from=JUN),
        Add("a", "aisle seat by the wing", valid_from=JAN),
        Found(("window seat by the wing",), "seat wing"),
        Found(("aisle seat by the wing",), "seat wing", as_of=MAR),
        tags=("search", "out_of_order"),
    ),
    _s(
        "a rollback as known at each step",
        Add("a", "aisle seat", valid_from=JAN),
        Add("w", "window seat", valid_from=JUN),
        Rollback("r", "a"),
        Add("x", "exit row"),
        Listed(("aisle seat",), known_at=After("r")),
        Listed(("window seat",), known_at=After("w")),
        Listed(("exit row",)),
        History("x", ("aisle seat", "window seat", "aisle seat", "exit row")),
        tags=("rollback", "known_at"),
    ),
]


@dataclass
class Outcome:
    scenario: str
    checks: int = 0
    met: int = 0
    failures: list[str] = field(default_factory=list)


def _instant(ref: After | Before | None, recorded: dict[str, str]) -> str | None:
    if ref is None:
        return None
    at = datetime.fromisoformat(recorded[ref.step].replace("Z", "+00:00"))
    if isinstance(ref, Before):
        at -= timedelta(microseconds=1)
    return at.isoformat()


def run_scenario(call: Call, app: str, run: str, scenario: Scenario) -> Outcome:
    """Run one scenario in users of its own (``<user>-<run>``) and check each expectation."""
    outcome = Outcome(scenario.name)
    ids: dict[str, str] = {}
    recorded: dict[str, str] = {}

    def base(user: str) -> str:
        return f"/api/v1/apps/{app}/users/{user}-{run}/memories"

    def check(ok: bool, what: str) -> None:
        outcome.checks += 1
        outcome.met += ok
        if not ok:
            outcome.failures.append(what)

    for step in scenario.steps:
        if isinstance(step, Add):
            body = {"content": step.content, "embed": "sync"}
            if step.key is not None:
                body["key"] = step.key
            if step.valid_from is not None:
                body["valid_from"] = step.valid_from
            status, answer = call("POST", base(step.user), body, None)
            check(status == step.status, f"add {step.name}: {status}, not {step.status}")
            if status in (200, 201):
                ids[step.name], recorded[step.name] = answer["id"], answer["recorded_at"]
        elif isinstance(step, Rollback):
            status, answer = call("POST", f"{base('alice')}/{ids[step.target]}/rollback", {}, None)
            check(status == step.status, f"rollback {step.name}: {status}, not {step.status}")
            if status in (200, 201):
                ids[step.name], recorded[step.name] = answer["id"], answer["recorded_at"]
        elif isinstance(step, Delete):
            status, _answer = call("DELETE", f"{base('alice')}/{ids[step.target]}", None, None)
            check(status == 204, f"delete {step.target}: {status}")
        elif isinstance(step, Listed | Found):
            when = {"as_of": step.as_of, "known_at": _instant(step.known_at, recorded)}
            when = {name: value for name, value in when.items() if value is not None}
            if isinstance(step, Listed):
                status, answer = call("GET", base(step.user), None, {"limit": "100", **when})
                got = [entry["content"] for entry in answer.get("results", [])]
            else:
                body = {"query": step.query, "mode": "hybrid", "limit": 10, **when}
                status, answer = call("POST", f"{base(step.user)}/search", body, None)
                got = [hit["content"] for hit in answer.get("hits", [])]
            check(
                status == 200 and sorted(got) == sorted(step.contents),
                f"read {when or 'now'} as {step.user}: {sorted(got)}, not {sorted(step.contents)}",
            )
        elif isinstance(step, History):
            status, answer = call("GET", f"{base('alice')}/{ids[step.target]}/history", None, None)
            got = [version["content"] for version in answer.get("versions", [])]
            check(
                status == 200 and tuple(got) == step.contents,
                f"history of {step.target}: {got}, not {list(step.contents)}",
            )
        else:  # pragma: no cover - a scenario's own mistake
            raise TypeError(f"unknown step {step!r}")
    return outcome


def run_suite(call: Call, app: str, run: str) -> dict:
    """Every scenario; the figures the bench reports and the test asserts."""
    outcomes = [
        run_scenario(call, app, f"{run}-{index}", scenario)
        for index, scenario in enumerate(SCENARIOS)
    ]
    checks = sum(outcome.checks for outcome in outcomes)
    met = sum(outcome.met for outcome in outcomes)
    tags: dict[str, int] = {}
    for scenario in SCENARIOS:
        for tag in scenario.tags:
            tags[tag] = tags.get(tag, 0) + 1
    return {
        "scenarios": len(outcomes),
        "scenarios_passed": sum(not outcome.failures for outcome in outcomes),
        "checks": checks,
        "checks_met": met,
        "score": round(met / checks, 4) if checks else 0.0,
        "by_tag": dict(sorted(tags.items())),
        "failures": {o.scenario: o.failures for o in outcomes if o.failures},
    }
