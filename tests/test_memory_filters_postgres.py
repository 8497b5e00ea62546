"""Memory-search filters: compiled conditions run on PostgreSQL (types, dates, scope,
injection, indexes, array text)."""

from __future__ import annotations

import calendar
import json
from datetime import date

import pytest
from django.db import connection
from hypothesis import given
from hypothesis import strategies as st

from memory.filters import (
    FilterError,
    compile_filter,
)
from tests.test_memory_filters import TEXT

# ---------------------------------------------------------------------------- PostgreSQL

CREATE_TABLE = (
    "CREATE TEMP TABLE memory_memoryentry (id serial, metadata jsonb NOT NULL, "
    "session_id varchar(128) NOT NULL DEFAULT '', "
    "created_at timestamptz NOT NULL DEFAULT now())"
)


class Entries:
    """A temporary ``memory_memoryentry`` whose rows are known by name."""

    def __init__(self, cursor):
        self.cursor = cursor
        self.names: dict[int, str] = {}

    def add(self, name: str, metadata, session_id: str = "", created_at: str | None = None):
        raw = metadata if isinstance(metadata, str) else json.dumps(metadata)
        self.cursor.execute(
            "INSERT INTO memory_memoryentry (metadata, session_id, created_at) "
            "VALUES (%s::jsonb, %s, coalesce(%s::timestamptz, now())) RETURNING id",
            [raw, session_id, created_at],
        )
        self.names[self.cursor.fetchone()[0]] = name

    def add_strings(self, key: str, strings: list[str]) -> None:
        """One row per string, holding it under ``key``; each row is named by its string."""
        self.cursor.execute(
            "INSERT INTO memory_memoryentry (metadata) "
            "SELECT jsonb_build_object(%s::text, s) FROM unnest(%s::text[]) AS s "
            "RETURNING id, metadata ->> %s",
            [key, strings, key],
        )
        self.names.update(dict(self.cursor.fetchall()))

    def match(self, spec) -> set[str]:
        sql, params = compile_filter(spec)
        query = "SELECT id FROM memory_memoryentry WHERE " + sql  # noqa: S608 - compiled filter
        self.cursor.execute(query, params)
        return {self.names[row[0]] for row in self.cursor.fetchall()}


@pytest.fixture
def entries(db):
    with connection.cursor() as cursor:
        cursor.execute(CREATE_TABLE)
        yield Entries(cursor)


@pytest.fixture
def numbers(entries):
    for name, raw in [
        ("int 10", '{"priority": 10}'),
        ("float 10.0", '{"priority": 10.0}'),
        ("exp 1e1", '{"priority": 1e1}'),
        ("float 10.5", '{"priority": 10.5}'),
        ("string 10", '{"priority": "10"}'),
        ("int 9", '{"priority": 9}'),
        ("int 1", '{"priority": 1}'),
        ("true", '{"priority": true}'),
        ("null", '{"priority": null}'),
        ("array [10]", '{"priority": [10]}'),
        ("object", '{"priority": {"value": 10}}'),
        ("missing", '{"other": 10}'),
        ("empty", "{}"),
    ]:
        entries.add(name, raw)
    return entries


def test_range_on_numbers_is_typed_and_numeric(numbers):
    assert numbers.match({"priority": {"$gt": 9}}) == {
        "int 10",
        "float 10.0",
        "exp 1e1",
        "float 10.5",
    }
    assert numbers.match({"priority": {"$gte": 10.5}}) == {"float 10.5"}
    assert numbers.match({"priority": {"$lt": 10}}) == {"int 9", "int 1"}
    assert numbers.match({"priority": {"$lte": 10}}) == {
        "int 10",
        "float 10.0",
        "exp 1e1",
        "int 9",
        "int 1",
    }
    assert numbers.match({"priority": {"$gt": 9, "$lt": 10.5}}) == {
        "int 10",
        "float 10.0",
        "exp 1e1",
    }
    assert numbers.match({"priority": {"$gt": -1e300}}) == {
        "int 10",
        "float 10.0",
        "exp 1e1",
        "float 10.5",
        "int 9",
        "int 1",
    }


def test_equality_on_numbers_is_typed(numbers):
    tens = {"int 10", "float 10.0", "exp 1e1"}
    assert numbers.match({"priority": 10}) == tens
    assert numbers.match({"priority": 10.0}) == tens
    assert numbers.match({"priority": {"$eq": 10}}) == tens
    assert numbers.match({"priority": "10"}) == {"string 10"}
    assert numbers.match({"priority": True}) == {"true"}
    assert numbers.match({"priority": 1}) == {"int 1"}
    assert numbers.match({"priority": None}) == {"null"}
    assert numbers.match({"priority": 10, "other": 10}) == set()


def test_numbers_compare_exactly_not_as_floats(entries):
    entries.add("2^53 + 1", '{"n": 9007199254740993}')
    entries.add("0.1", '{"n": 0.1}')
    entries.add("huge", '{"n": 1e400}')
    assert entries.match({"n": {"$gt": 9007199254740992}}) == {"2^53 + 1", "huge"}
    assert entries.match({"n": 9007199254740993}) == {"2^53 + 1"}
    assert entries.match({"n": 9007199254740992}) == set()
    assert entries.match({"n": {"$gt": 0.1, "$lt": 1}}) == set()
    assert entries.match({"n": {"$gte": 0.1, "$lt": 1}}) == {"0.1"}
    assert entries.match({"n": {"$gt": 1e300}}) == {"huge"}


def test_equality_never_matches_inside_arrays_or_objects(entries):
    entries.add("tags", {"tags": ["a", "b"]})
    entries.add("tag", {"tags": "a"})
    entries.add("nested", {"tags": {"a": 1}})
    assert entries.match({"tags": "a"}) == {"tag"}
    assert entries.match({"tags": {"$in": ["a", "b"]}}) == {"tag"}
    assert entries.match({"tags": {"$exists": True}}) == {"tags", "tag", "nested"}


def test_in_and_nin_with_mixed_types(numbers):
    assert numbers.match({"priority": {"$in": ["10", 10, True, None]}}) == {
        "string 10",
        "int 10",
        "float 10.0",
        "exp 1e1",
        "true",
        "null",
    }
    assert numbers.match({"priority": {"$in": [9]}}) == {"int 9"}
    # $nin is the negation of $in: entries without the key match it.
    assert numbers.match({"priority": {"$nin": ["10", 10, True, None]}}) == {
        "float 10.5",
        "int 9",
        "int 1",
        "array [10]",
        "object",
        "missing",
        "empty",
    }


def test_ne_matches_entries_without_the_key(numbers):
    assert numbers.match({"priority": {"$ne": 10}}) == {
        "float 10.5",
        "string 10",
        "int 9",
        "int 1",
        "true",
        "null",
        "array [10]",
        "object",
        "missing",
        "empty",
    }
    assert numbers.match({"priority": {"$ne": None}}) - {"missing", "empty"} == (
        numbers.match({"priority": {"$exists": True}}) - {"null"}
    )
    assert numbers.match({"priority": {"$ne": 10, "$exists": True}}) == {
        "float 10.5",
        "string 10",
        "int 9",
        "int 1",
        "true",
        "null",
        "array [10]",
        "object",
    }


def test_exists(numbers):
    present = numbers.match({"priority": {"$exists": True}})
    assert present == set(numbers.names.values()) - {"missing", "empty"}
    assert "null" in present
    assert numbers.match({"priority": {"$exists": False}}) == {"missing", "empty"}
    assert numbers.match({"other": {"$exists": True}, "priority": {"$exists": False}}) == {
        "missing"
    }


def test_keys_are_plain_names_not_paths(entries):
    entries.add("dotted", {"a.b": 1})
    entries.add("nested", {"a": {"b": 1}})
    entries.add("punctuated", {"x:y-z_1": "v"})
    assert entries.match({"a.b": 1}) == {"dotted"}
    assert entries.match({"a.b": {"$gte": 1}}) == {"dotted"}
    assert entries.match({"x:y-z_1": "v"}) == {"punctuated"}
    assert entries.match({"a": {"$exists": True}}) == {"nested"}


def test_unicode_strings(entries):
    entries.add("greek", {"name": "Ωμέγα ✓ 🙂"})
    entries.add("ascii", {"name": "omega"})
    assert entries.match({"name": "Ωμέγα ✓ 🙂"}) == {"greek"}
    assert entries.match({"name": {"$in": ["omega", "🙂"]}}) == {"ascii"}


@pytest.fixture
def dates(entries):
    for name, value in [
        ("date", "2024-05-01"),
        ("utc 10:00", "2024-05-01T10:00:00Z"),
        ("+02 12:00", "2024-05-01T12:00:00+02:00"),
        ("zoneless 10:00", "2024-05-01T10:00:00"),
        ("space 09:59:59.5", "2024-05-01 09:59:59.5Z"),
        ("+05 next day", "2024-05-02T00:30:00+05:00"),
        ("leap day", "2024-02-29"),
        ("april", "2024-04-30T23:59:59-00:30"),
        ("bad month", "2024-13-45"),
        ("bad day", "2024-02-30"),
        ("not leap", "2023-02-29"),
        ("bad hour", "2024-05-01T24:00:00Z"),
        ("bad zone", "2024-05-01T10:00:00+16:00"),
        ("year zero", "0000-01-01"),
        ("prefix", "2024-05-01 and more"),
        ("suffix junk", "2024-05-01T10:00:00Zjunk"),
        ("leading space", " 2024-05-01"),
        ("trailing newline", "2024-05-01\n"),
        ("fullwidth digits", "\uff12\uff10\uff12\uff14-05-01"),
        ("arabic digits", "\u0662\u0660\u0662\u0664-\u0660\u0665-\u0660\u0661"),
        ("now", "now"),
        ("today", "today"),
        ("epoch", "epoch"),
        ("infinity", "infinity"),
        ("us style", "05/01/2024"),
        ("words", "not a date"),
        ("empty", ""),
    ]:
        entries.add(name, {"due": value})
    entries.add("number", {"due": 20240501})
    entries.add("array", {"due": ["2024-05-01"]})
    entries.add("object", {"due": {"on": "2024-05-01"}})
    entries.add("missing", {})
    return entries


def test_date_ranges_on_metadata_strings(dates):
    assert dates.match({"due": {"$gte": "2024-05-01T10:00:00Z"}}) == {
        "utc 10:00",
        "+02 12:00",
        "zoneless 10:00",
        "+05 next day",
    }
    assert dates.match({"due": {"$gt": "2024-05-01T10:00:00Z"}}) == {"+05 next day"}
    assert dates.match({"due": {"$lt": "2024-05-01T10:00:00+00:00"}}) == {
        "date",
        "space 09:59:59.5",
        "leap day",
        "april",
    }
    assert dates.match({"due": {"$gte": "2024-05-01", "$lte": "2024-05-01T23:59:59Z"}}) == {
        "date",
        "april",
        "utc 10:00",
        "+02 12:00",
        "zoneless 10:00",
        "space 09:59:59.5",
        "+05 next day",
    }
    # "2024-04-30T23:59:59-00:30" is 2024-05-01T00:29:59Z.
    assert dates.match({"due": {"$gt": "2024-05-01", "$lt": "2024-05-01T00:30:00Z"}}) == {"april"}
    assert dates.match({"due": {"$lte": "2024-05-01"}}) == {"date", "leap day"}
    assert dates.match({"due": {"$lte": "2024-02-29T00:00:00+14:00"}}) == set()


def test_date_only_and_zoneless_values_are_utc_whatever_the_session_time_zone(dates):
    spec = {"due": {"$gte": "2024-05-01T00:00:00Z", "$lte": "2024-05-01T10:00:00Z"}}
    expected = {"date", "april", "utc 10:00", "+02 12:00", "zoneless 10:00", "space 09:59:59.5"}
    assert dates.match(spec) == expected
    dates.cursor.execute("SET LOCAL TIME ZONE 'Pacific/Kiritimati'")
    assert dates.match(spec) == expected
    dates.cursor.execute("SET LOCAL TIME ZONE 'America/Los_Angeles'")
    assert dates.match(spec) == expected


def test_equality_on_date_strings_is_string_equality(dates):
    assert dates.match({"due": "2024-05-01"}) == {"date"}
    assert dates.match({"due": "2024-05-01T10:00:00Z"}) == {"utc 10:00"}


def _grid() -> list[tuple[str, int | None]]:
    """Date-like strings with their instant (whole UTC seconds since 0001-01-01), or None
    when the string is not a valid date, date-time or zoned date-time; computed without
    the filter module's patterns."""

    def day_seconds(year: int, month: int, day: int) -> int | None:
        if year < 1 or not 1 <= month <= 12 or not 1 <= day <= calendar.monthrange(year, month)[1]:
            return None
        return (date(year, month, day).toordinal() - 1) * 86400

    cases: list[tuple[str, int | None]] = []
    for year in (0, 1, 4, 100, 1900, 2000, 2023, 2024, 2100, 9999):
        for month in range(14):
            for day in range(34):
                cases.append((f"{year:04d}-{month:02d}-{day:02d}", day_seconds(year, month, day)))
    zones = {
        "": 0,
        "Z": 0,
        "+00:00": 0,
        "+15:59": 959,
        "-15:59": -959,
        "+0530": 330,
        "-05": -300,
        "+16:00": None,
        "-24:00": None,
        "+5:30": None,
        "+05:60": None,
        "z": None,
    }
    for day_text, year, month, day in [
        ("2024-02-29", 2024, 2, 29),
        ("0001-01-01", 1, 1, 1),
        ("9999-12-31", 9999, 12, 31),
    ]:
        base = day_seconds(year, month, day)
        for separator in ("T", " "):
            for hour in (0, 9, 23, 24, 25):
                for minute in (0, 59, 60):
                    for second, fraction in [
                        (None, ""),
                        (0, ""),
                        (59, ""),
                        (60, ""),
                        (59, ".5"),
                        (0, ".123456789"),
                        (0, ".1234567890"),
                    ]:
                        clock = f"{hour:02d}:{minute:02d}"
                        if second is not None:
                            clock += f":{second:02d}{fraction}"
                        for zone, offset in zones.items():
                            valid = (
                                hour <= 23
                                and minute <= 59
                                and (second or 0) <= 59
                                and len(fraction) <= 10
                                and offset is not None
                            )
                            instant = (
                                base + hour * 3600 + minute * 60 + (second or 0) - offset * 60
                                if valid
                                else None
                            )
                            cases.append((f"{day_text}{separator}{clock}{zone}", instant))
    return cases


def test_date_ranges_over_a_grid_of_valid_and_impossible_dates_never_raise(entries):
    cases = _grid()
    entries.add_strings("d", [text for text, _ in cases])
    instants = dict(cases)
    for operator, bound_text, bound in [
        ("$gte", "2024-02-29T12:00:00Z", (date(2024, 2, 29).toordinal() - 1) * 86400 + 43200),
        ("$lt", "0001-01-02", 86400),
        ("$gte", "0001-01-01", 0),
        ("$lt", "0001-01-01T00:00:00-15:00", 54000),
        ("$gte", "9999-12-31T12:00:00+00:00", (date(9999, 12, 31).toordinal() - 1) * 86400 + 43200),
    ]:
        expected = {
            text
            for text, instant in instants.items()
            if instant is not None and (instant >= bound if operator == "$gte" else instant < bound)
        }
        assert entries.match({"d": {operator: bound_text}}) == expected, (operator, bound_text)
    assert len(entries.match({"d": {"$gte": "0001-01-01T00:00:00+15:59"}})) == sum(
        instant is not None for instant in instants.values()
    )


def test_session_id(entries):
    entries.add("s1", {}, session_id="s1")
    entries.add("s2", {}, session_id="s2")
    entries.add("none", {})
    entries.add("quoted", {}, session_id="s1' OR '1'='1")
    assert entries.match({"session_id": "s1"}) == {"s1"}
    assert entries.match({"session_id": {"$eq": "s2"}}) == {"s2"}
    assert entries.match({"session_id": ""}) == {"none"}
    assert entries.match({"session_id": {"$in": ["s1", "s2", "s3"]}}) == {"s1", "s2"}
    assert entries.match({"session_id": {"$in": ["", "s2"]}}) == {"none", "s2"}
    assert entries.match({"session_id": "s1' OR '1'='1"}) == {"quoted"}
    assert entries.match({"session_id": "S1"}) == set()


def test_created_at(entries):
    entries.add("april", {}, created_at="2024-04-30T23:00:00Z")
    entries.add("may", {}, created_at="2024-05-01T00:00:00Z")
    entries.add("may noon", {}, created_at="2024-05-01T12:00:00Z")
    entries.add("june", {}, created_at="2024-06-01T00:00:00Z")
    assert entries.match({"created_at": {"$gte": "2024-05-01"}}) == {"may", "may noon", "june"}
    assert entries.match({"created_at": {"$gt": "2024-05-01"}}) == {"may noon", "june"}
    assert entries.match({"created_at": {"$lt": "2024-05-01T02:00:00+02:00"}}) == {"april"}
    assert entries.match({"created_at": {"$lte": "2024-05-01T00:00:00Z"}}) == {"april", "may"}
    assert entries.match(
        {"created_at": {"$gte": "2024-05-01T00:00:00Z", "$lt": "2024-06-01T00:00:00Z"}}
    ) == {"may", "may noon"}


def test_conditions_are_anded(entries):
    entries.add("a", {"topic": "billing", "priority": 5}, session_id="s1")
    entries.add("b", {"topic": "billing", "priority": 1}, session_id="s1")
    entries.add("c", {"topic": "billing", "priority": 5}, session_id="s2")
    entries.add("d", {"topic": "support", "priority": 5}, session_id="s1")
    spec = {
        "topic": "billing",
        "priority": {"$gte": 2, "$ne": 7},
        "session_id": "s1",
        "created_at": {"$lte": "2999-01-01"},
    }
    assert entries.match(spec) == {"a"}


INJECTIONS = [
    "x' OR '1'='1",
    "x'); DROP TABLE memory_memoryentry; --",
    '"} OR TRUE --',
    "%s",
    "%%s %(name)s",
    "$1",
    "\\",
    "'",
    '"',
    "?",
    "metadata ? 'k'",
    "::jsonb",
]


@pytest.mark.parametrize(
    "key",
    [
        "k' OR '1'='1",
        "k') OR TRUE --",
        "k; DROP TABLE memory_memoryentry",
        "app_id = app_id OR",
        '"k"',
        "k%s",
        "$or",
        "k\\",
    ],
)
def test_injection_through_keys_is_rejected(key):
    for spec in ({key: 1}, {key: {"$exists": True}}, {key: {"$gt": 1}}):
        with pytest.raises(FilterError):
            compile_filter(spec)


def test_injection_through_values_is_harmless(entries):
    for index, value in enumerate(INJECTIONS):
        entries.add(f"row {index}", {"k": value}, session_id=value[:128])
    entries.add("other", {"k": "other"})
    for index, value in enumerate(INJECTIONS):
        name = f"row {index}"
        assert entries.match({"k": value}) == {name}
        assert entries.match({"k": {"$in": [value, "nothing"]}}) == {name}
        assert entries.match({"k": {"$ne": value}}) == set(entries.names.values()) - {name}
        assert entries.match({"session_id": value}) == {name}
        assert entries.match({"session_id": {"$in": [value]}}) == {name}
        with pytest.raises(FilterError):
            compile_filter({"k": {"$gt": value}})
    entries.cursor.execute("SELECT count(*) FROM memory_memoryentry")
    assert entries.cursor.fetchone()[0] == len(INJECTIONS) + 1


def test_a_filter_cannot_widen_the_scope_it_is_anded_with(db):
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE TEMP TABLE memory_memoryentry (id serial, app_id int NOT NULL, "
            "user_id text NOT NULL, metadata jsonb NOT NULL, "
            "session_id varchar(128) NOT NULL DEFAULT '', "
            "created_at timestamptz NOT NULL DEFAULT now())"
        )
        for app_id, user_id in [(1, "u1"), (1, "u2"), (2, "u1")]:
            cursor.execute(
                "INSERT INTO memory_memoryentry (app_id, user_id, metadata) "
                "VALUES (%s, %s, %s::jsonb)",
                [app_id, user_id, json.dumps({"app_id": 2, "user_id": "u2", "k": "v"})],
            )
        cursor.execute("SELECT id FROM memory_memoryentry WHERE app_id = 1 AND user_id = 'u1'")
        (own,) = cursor.fetchone()
        for spec in [
            {},
            {"app_id": 2},
            {"user_id": "u2"},
            {"k": {"$ne": "nothing"}},
            {"k": {"$nin": ["x' OR TRUE OR '"]}},
            {"k": "v' OR app_id = 2 OR 'a'='a"},
            {"missing": {"$exists": False}},
        ]:
            sql, params = compile_filter(spec)
            assert "app_id" not in sql
            assert "user_id" not in sql
            scoped = "SELECT id FROM memory_memoryentry WHERE app_id = %s AND user_id = %s AND "
            cursor.execute(scoped + sql, [1, "u1", *params])
            assert {row[0] for row in cursor.fetchall()} <= {own}


def test_equality_is_served_by_a_gin_index_with_number_semantics_intact(numbers):
    cursor = numbers.cursor
    cursor.execute(
        "CREATE INDEX memory_filters_test_gin ON memory_memoryentry "
        "USING gin (metadata jsonb_path_ops)"
    )
    cursor.execute("SET LOCAL enable_seqscan = off")
    for spec in ({"priority": 10}, {"priority": {"$in": [10, "10"]}}):
        sql, params = compile_filter(spec)
        query = "EXPLAIN SELECT id FROM memory_memoryentry WHERE " + sql  # noqa: S608
        cursor.execute(query, params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
        assert "memory_filters_test_gin" in plan, plan
    assert numbers.match({"priority": 10}) == {"int 10", "float 10.0", "exp 1e1"}
    assert numbers.match({"priority": 10.0}) == {"int 10", "float 10.0", "exp 1e1"}
    assert numbers.match({"priority": {"$in": [10, "10"]}}) == {
        "int 10",
        "float 10.0",
        "exp 1e1",
        "string 10",
    }


def test_any_strings_in_a_list_match_exactly_their_own_entries(entries):
    """The array text quotes every character PostgreSQL's array input would read:
    quotes, backslashes, braces, commas, blanks, ``NULL``."""
    tricky = ['a"b', "c\\d", "{e,f}", " g ", "NULL", "", "h\\", '\\"', "}", "'"]

    @given(st.lists(TEXT, min_size=1, max_size=6, unique=True))
    def check(strings):
        strings = list(dict.fromkeys([*strings, *tricky]))
        entries.cursor.execute("DELETE FROM memory_memoryentry")
        entries.names.clear()
        entries.add_strings("k", [*strings, "other"])
        chosen = strings[::2]
        assert entries.match({"k": {"$in": chosen}}) == set(chosen)
        assert entries.match({"k": {"$nin": chosen}}) == {"other", *strings[1::2]}

    check()
