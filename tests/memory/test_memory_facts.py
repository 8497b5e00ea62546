"""The pure core of facts over time (``memory/facts.py``): the key grammar, where a new
version goes in its key's valid-time history, and which version a reader at (as_of,
known_at) sees."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxadmin.errors import ServiceError
from memory.facts import (
    MAX_FACT_KEY_LENGTH,
    Placement,
    Version,
    parse_fact_key,
    parse_instant,
    place,
    validity_sql,
    visible,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def day(n: int) -> datetime:
    return T0 + timedelta(days=n)


class TestFactKey:
    @pytest.mark.parametrize(
        ("given", "folded"),
        [
            ("preference.seat", "preference.seat"),
            ("Preference.SEAT", "preference.seat"),
            ("a", "a"),
            ("home_city", "home_city"),
            ("diet.no-nuts.2026", "diet.no-nuts.2026"),
            ("x" * MAX_FACT_KEY_LENGTH, "x" * MAX_FACT_KEY_LENGTH),
        ],
    )
    def test_accepted_and_case_folded(self, given, folded):
        assert parse_fact_key(given) == folded

    def test_absent_is_none(self):
        assert parse_fact_key(None) is None

    @pytest.mark.parametrize(
        "given",
        [
            "",
            ".seat",
            "seat.",
            "a..b",
            "seat preference",
            "seat/aisle",
            "seat:aisle",
            "café",
            "\u212a",  # the Kelvin sign, which case-folds to k
            "x" * (MAX_FACT_KEY_LENGTH + 1),
            7,
            ["a"],
            True,
        ],
    )
    def test_refused_naming_key(self, given):
        with pytest.raises(ServiceError) as raised:
            parse_fact_key(given)
        assert raised.value.status_code == 400
        assert raised.value.details["field"] == "key"

    @given(st.text(max_size=140))
    def test_anything_accepted_matches_the_grammar(self, text):
        try:
            folded = parse_fact_key(text)
        except ServiceError:
            return
        assert 1 <= len(folded) <= MAX_FACT_KEY_LENGTH
        assert all(segment for segment in folded.split("."))
        assert set(folded) <= set("abcdefghijklmnopqrstuvwxyz0123456789_-.")


class TestInstant:
    def test_iso_with_zone(self):
        assert parse_instant("2026-06-01T09:00:00Z", "as_of") == datetime(2026, 6, 1, 9, tzinfo=UTC)
        assert parse_instant("2026-06-01T11:00:00+02:00", "as_of") == datetime(
            2026, 6, 1, 9, tzinfo=UTC
        )

    @pytest.mark.parametrize(
        "given", ["2026-06-01T09:00:00", "yesterday", "", 1780000000, "2" * 65, True]
    )
    def test_refused_naming_the_field(self, given):
        with pytest.raises(ServiceError) as raised:
            parse_instant(given, "known_at")
        assert raised.value.details["field"] == "known_at"


class TestPlace:
    def test_first_version_is_open(self):
        assert place([], day(0)) == Placement(None, None, None)

    def test_a_newer_version_closes_the_live_one(self):
        live = Version("a", day(0), None)
        assert place([live], day(5)) == Placement(None, None, "a")

    def test_an_older_version_goes_before_the_first(self):
        live = Version("a", day(5), None)
        assert place([live], day(1)) == Placement(day(5), "a", None)

    def test_an_older_version_inside_a_closed_one_splits_it(self):
        versions = [Version("a", day(0), day(10), "b"), Version("b", day(10), None)]
        # Falls inside a: a ends at day 3, the new one runs to day 10 and is followed by b.
        assert place(versions, day(3)) == Placement(day(10), "b", "a")

    def test_the_same_start_as_the_live_one_replaces_it_in_valid_time(self):
        live = Version("a", day(2), None)
        assert place([live], day(2)) == Placement(None, None, "a")

    def test_a_gap_left_by_a_deleted_version(self):
        versions = [Version("a", day(0), day(4)), Version("c", day(8), None)]
        assert place(versions, day(5)) == Placement(day(8), "c", None)
        assert place(versions, day(9)) == Placement(None, None, "c")


def _apply(versions: dict[str, Version], new_id: str, start: datetime) -> Placement:
    placement = place(list(versions.values()), start)
    if placement.closes is not None:
        closed = versions[placement.closes]
        versions[closed.id] = Version(closed.id, closed.valid_from, start, new_id)
    versions[new_id] = Version(new_id, start, placement.valid_to, placement.superseded_by)
    return placement


@settings(max_examples=300)
@given(st.lists(st.integers(min_value=0, max_value=40), min_size=1, max_size=12))
def test_any_arrival_order_tiles_valid_time_by_latest_start(starts):
    """Whatever order versions arrive in, the key's versions tile valid time: at each
    instant from the earliest start on, exactly one version is valid, the one with the
    latest start at or before it (the later-recorded one among equal starts); the chain of
    successors visits them in valid-time order; exactly one is open."""
    versions: dict[str, Version] = {}
    for n, start in enumerate(starts):
        _apply(versions, f"v{n}", day(start))
    open_ = [v for v in versions.values() if v.valid_to is None]
    assert len(open_) == 1
    for instant in range(min(starts), 42):
        at = day(instant)
        valid = [
            v.id
            for v in versions.values()
            if v.valid_from <= at and (v.valid_to is None or at < v.valid_to)
        ]
        candidates = [n for n, s in enumerate(starts) if s <= instant]
        expected = f"v{max(candidates, key=lambda n: (starts[n], n))}"
        assert valid == [expected]
    for v in versions.values():
        if v.superseded_by is not None:
            assert versions[v.superseded_by].valid_from == v.valid_to
    # The chain of successors holds every version once, in valid-time order.
    heads = set(versions) - {v.superseded_by for v in versions.values()}
    assert len(heads) == 1
    seen, node = [], heads.pop()
    while node is not None:
        seen.append(node)
        node = versions[node].superseded_by
    assert sorted(seen) == sorted(versions)
    assert [versions[n].valid_from for n in seen] == sorted(v.valid_from for v in versions.values())


class TestVisible:
    def test_before_it_was_recorded_a_version_is_unseen(self):
        row = {"valid_from": day(0), "valid_to": None, "recorded_at": day(5), "retired_at": None}
        assert not visible(**row, as_of=day(6), known_at=day(4))
        assert visible(**row, as_of=day(6), known_at=day(5))

    def test_before_it_was_valid_a_version_is_unseen(self):
        row = {"valid_from": day(3), "valid_to": None, "recorded_at": day(0), "retired_at": None}
        assert not visible(**row, as_of=day(2), known_at=day(9))
        assert visible(**row, as_of=day(3), known_at=day(9))

    def test_a_closed_version_was_open_until_it_was_closed(self):
        row = {
            "valid_from": day(0),
            "valid_to": day(4),
            "recorded_at": day(0),
            "retired_at": day(6),
        }
        assert visible(**row, as_of=day(3), known_at=day(9))
        assert not visible(**row, as_of=day(4), known_at=day(9))
        # Known at day 5, it had not been closed: valid at day 8 as far as anyone knew.
        assert visible(**row, as_of=day(8), known_at=day(5))

    def test_the_default_reader_is_a_plain_condition(self):
        sql, params = validity_sql(None, None)
        assert params == [] and "statement_timestamp()" in sql
        sql, params = validity_sql(day(1), None)
        assert params == [day(1), None, None, day(1), None]


@settings(max_examples=300)
@given(st.lists(st.integers(min_value=0, max_value=20), min_size=1, max_size=8))
def test_every_reader_sees_exactly_the_version_the_history_known_then_holds(starts):
    """Versions arrive one a day (record time) with these valid-time starts, in any order.
    Each closing stamps ``retired_at`` once (the first), as the service does, and a cut of
    a version already closed keeps its earlier end in ``earlier_ends``. A reader at any
    (as_of, known_at) sees exactly the version that the history of the versions recorded
    by ``known_at`` holds at ``as_of`` (none before the earliest start)."""
    versions: dict[str, Version] = {}
    recorded: dict[str, datetime] = {}
    retired: dict[str, datetime] = {}
    earlier: dict[str, list] = {}
    for n, start in enumerate(starts):
        new_id, now = f"v{n}", day(100 + n)
        before = dict(versions)
        placement = _apply(versions, new_id, day(start))
        recorded[new_id] = now
        if placement.closes is not None:
            if placement.closes in retired:
                earlier.setdefault(placement.closes, []).append(
                    (before[placement.closes].valid_to, now)
                )
            retired.setdefault(placement.closes, now)
        if placement.valid_to is not None:
            retired[new_id] = now
    for known in range(100, 100 + len(starts)):
        history: dict[str, Version] = {}
        for n, start in enumerate(starts[: known - 99]):
            _apply(history, f"v{n}", day(start))
        for instant in range(0, 22):
            seen = [
                v.id
                for v in versions.values()
                if visible(
                    valid_from=v.valid_from,
                    valid_to=v.valid_to,
                    recorded_at=recorded[v.id],
                    retired_at=retired.get(v.id),
                    as_of=day(instant),
                    known_at=day(known),
                    earlier_ends=earlier.get(v.id, ()),
                )
            ]
            expected = [
                v.id
                for v in history.values()
                if v.valid_from <= day(instant)
                and (v.valid_to is None or day(instant) < v.valid_to)
            ]
            assert seen == expected
