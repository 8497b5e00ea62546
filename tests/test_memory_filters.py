"""Memory-search filters: validation and compiled shapes (pure), and their cost."""

from __future__ import annotations

import math
import re

import pytest
from django.db import connection
from hypothesis import given
from hypothesis import strategies as st

from memory.filters import (
    MAX_CONDITIONS,
    MAX_IN_VALUES,
    MAX_STRING_BYTES,
    FilterError,
    compile_filter,
)

# ---------------------------------------------------------------------------- validation

INVALID = [
    # the filter itself
    ([], "filter", "must be a JSON object"),
    ("priority = 1", "filter", "must be a JSON object"),
    ({1: "a"}, "filter.1", "keys must be strings"),
    # keys
    ({"": 1}, "filter.", "metadata keys are 1-64 characters"),
    ({"k" * 65: 1}, "filter." + "k" * 65, "metadata keys are 1-64 characters"),
    ({"a b": 1}, "filter.a b", "metadata keys"),
    ({"a'b": 1}, "filter.a'b", "metadata keys"),
    ({"é": 1}, "filter.é", "metadata keys"),
    ({"a/b": 1}, "filter.a/b", "metadata keys"),
    ({"a\x00": 1}, "filter.a\x00", "metadata keys"),
    ({"$and": [{"a": 1}]}, "filter.$and", "logical operators are not supported"),
    ({"$or": [{"a": 1}, {"b": 2}]}, "filter.$or", "logical operators are not supported"),
    ({"$not": {"a": 1}}, "filter.$not", "logical operators are not supported"),
    ({"$nor": []}, "filter.$nor", "logical operators are not supported"),
    ({"$gt": 1}, "filter.$gt", "operators go inside a key's condition object"),
    ({"$where": "1=1"}, "filter.$where", "operators go inside"),
    # values and operator objects
    ({"k": [1, 2]}, "filter.k", "objects and lists are not scalars"),
    ({"k": {}}, "filter.k", "at least one operator"),
    ({"k": {"a": 1}}, "filter.k.a", "nested objects are not supported"),
    ({"k": {"$eq": 1, "a": 1}}, "filter.k.a", "nested objects are not supported"),
    ({"k": {"$regex": "x"}}, "filter.k.$regex", "unknown operator"),
    ({"k": {"$or": [1]}}, "filter.k.$or", "logical operators are not supported"),
    ({"k": {1: 1}}, "filter.k.1", "keys must be strings"),
    ({"k": {"$eq": [1]}}, "filter.k.$eq", "not scalars"),
    ({"k": {"$eq": {"$eq": 1}}}, "filter.k.$eq", "not scalars"),
    ({"k": {"$ne": {}}}, "filter.k.$ne", "not scalars"),
    ({"k": b"bytes"}, "filter.k", "unsupported value of type bytes"),
    ({"k": (1, 2)}, "filter.k", "unsupported value"),
    # numbers
    ({"k": math.nan}, "filter.k", "finite"),
    ({"k": math.inf}, "filter.k", "finite"),
    ({"k": {"$eq": -math.inf}}, "filter.k.$eq", "finite"),
    ({"k": {"$ne": math.nan}}, "filter.k.$ne", "finite"),
    ({"k": {"$gt": math.nan}}, "filter.k.$gt", "finite"),
    ({"k": {"$lte": math.inf}}, "filter.k.$lte", "finite"),
    ({"k": {"$in": [1, math.nan]}}, "filter.k.$in[1]", "finite"),
    ({"k": 10**5000}, "filter.k", "number too large"),
    ({"k": {"$gt": 10**5000}}, "filter.k.$gt", "number too large"),
    # strings
    ({"k": "a\x00b"}, "filter.k", "NUL"),
    ({"k": {"$in": ["a", "\x00"]}}, "filter.k.$in[1]", "NUL"),
    ({"k": "\ud800"}, "filter.k", "valid Unicode"),
    # range operators
    ({"k": {"$gt": True}}, "filter.k.$gt", "expected a number or a date string"),
    ({"k": {"$gte": False}}, "filter.k.$gte", "expected a number or a date string"),
    ({"k": {"$lt": None}}, "filter.k.$lt", "expected a number or a date string"),
    ({"k": {"$lte": [1]}}, "filter.k.$lte", "expected a number or a date string"),
    ({"k": {"$gt": {"$date": "2024-01-01"}}}, "filter.k.$gt", "number or a date string"),
    ({"k": {"$gt": "10"}}, "filter.k.$gt", "ISO 8601"),
    ({"k": {"$gt": "yesterday"}}, "filter.k.$gt", "ISO 8601"),
    ({"k": {"$gt": "now"}}, "filter.k.$gt", "ISO 8601"),
    ({"k": {"$gt": "2024-13-01"}}, "filter.k.$gt", "ISO 8601"),
    ({"k": {"$gt": "2024-13-45"}}, "filter.k.$gt", "ISO 8601"),
    ({"k": {"$gt": "2024-02-30"}}, "filter.k.$gt", "ISO 8601"),
    ({"k": {"$gt": "2023-02-29"}}, "filter.k.$gt", "ISO 8601"),
    ({"k": {"$gt": "1900-02-29"}}, "filter.k.$gt", "ISO 8601"),
    ({"k": {"$gt": "0000-01-01"}}, "filter.k.$gt", "ISO 8601"),
    ({"k": {"$gt": "2024-5-1"}}, "filter.k.$gt", "ISO 8601"),
    ({"k": {"$gt": "20240501"}}, "filter.k.$gt", "ISO 8601"),
    ({"k": {"$gt": "2024-05-01\n"}}, "filter.k.$gt", "ISO 8601"),
    ({"k": {"$gt": "\uff12\uff10\uff12\uff14-05-01"}}, "filter.k.$gt", "ISO 8601"),
    ({"k": {"$gt": "2024-05-01T25:00Z"}}, "filter.k.$gt", "ISO 8601"),
    ({"k": {"$gt": "2024-05-01T10:00+16:00"}}, "filter.k.$gt", "ISO 8601"),
    ({"k": {"$gt": "2024-05-01T10:00z"}}, "filter.k.$gt", "ISO 8601"),
    ({"k": {"$gt": "2024-05-01T10:00:00.1234567890Z"}}, "filter.k.$gt", "ISO 8601"),
    ({"k": {"$gt": "2024-05-01T10:00"}}, "filter.k.$gt", "needs a time zone"),
    ({"k": {"$lt": "2024-05-01 10:00:00"}}, "filter.k.$lt", "needs a time zone"),
    # $in / $nin
    ({"k": {"$in": "a"}}, "filter.k.$in", "expected a list"),
    ({"k": {"$in": []}}, "filter.k.$in", "non-empty list"),
    ({"k": {"$nin": []}}, "filter.k.$nin", "non-empty list"),
    ({"k": {"$in": list(range(MAX_IN_VALUES + 1))}}, "filter.k.$in", "at most 100 values"),
    ({"k": {"$in": [1, 2, [3]]}}, "filter.k.$in[2]", "not scalars"),
    ({"k": {"$nin": [{"a": 1}]}}, "filter.k.$nin[0]", "not scalars"),
    # $exists
    ({"k": {"$exists": 1}}, "filter.k.$exists", "expected true or false"),
    ({"k": {"$exists": "true"}}, "filter.k.$exists", "expected true or false"),
    ({"k": {"$exists": None}}, "filter.k.$exists", "expected true or false"),
    # session_id
    ({"session_id": 1}, "filter.session_id", "expected a string"),
    ({"session_id": None}, "filter.session_id", "expected a string"),
    ({"session_id": "s" * 129}, "filter.session_id", "at most 128 characters"),
    ({"session_id": "s\x00"}, "filter.session_id", "NUL"),
    ({"session_id": {}}, "filter.session_id", "at least one operator"),
    ({"session_id": {"$ne": "s"}}, "filter.session_id.$ne", "expected one of $eq, $in"),
    ({"session_id": {"$gt": "s"}}, "filter.session_id.$gt", "unknown operator"),
    ({"session_id": {"$exists": True}}, "filter.session_id.$exists", "unknown operator"),
    ({"session_id": {"$eq": 5}}, "filter.session_id.$eq", "expected a string"),
    ({"session_id": {"$in": []}}, "filter.session_id.$in", "non-empty list"),
    ({"session_id": {"$in": "s1"}}, "filter.session_id.$in", "expected a list"),
    ({"session_id": {"$in": ["s1", None]}}, "filter.session_id.$in[1]", "expected a string"),
    (
        {"session_id": {"$in": [f"s{i}" for i in range(101)]}},
        "filter.session_id.$in",
        "at most 100 values",
    ),
    # created_at
    ({"created_at": "2024-01-01"}, "filter.created_at", "range operators"),
    ({"created_at": {}}, "filter.created_at", "at least one operator"),
    ({"created_at": {"$eq": "2024-01-01"}}, "filter.created_at.$eq", "unknown operator"),
    ({"created_at": {"$in": ["2024-01-01"]}}, "filter.created_at.$in", "unknown operator"),
    ({"created_at": {"$gt": 1714521600}}, "filter.created_at.$gt", "ISO 8601"),
    ({"created_at": {"$gt": "last week"}}, "filter.created_at.$gt", "ISO 8601"),
    ({"created_at": {"$lt": "2024-02-30"}}, "filter.created_at.$lt", "ISO 8601"),
    ({"created_at": {"$gte": "2024-05-01T10:00:00"}}, "filter.created_at.$gte", "time zone"),
    # size
    (
        {f"k{i}": i for i in range(MAX_CONDITIONS + 1)},
        "filter",
        "too many conditions: at most 32",
    ),
    (
        {f"k{i}": {"$gt": 0, "$lt": 9, "$ne": 5} for i in range(11)},
        "filter",
        "too many conditions",
    ),
]


@pytest.mark.parametrize(("spec", "path", "fragment"), INVALID)
def test_invalid_filters_name_the_offending_path(spec, path, fragment):
    with pytest.raises(FilterError) as caught:
        compile_filter(spec)
    assert caught.value.path == path
    assert fragment in caught.value.message
    assert str(caught.value) == f"{path}: {caught.value.message}"
    assert isinstance(caught.value, ValueError)


def test_long_keys_are_shortened_in_the_error_path():
    with pytest.raises(FilterError) as caught:
        compile_filter({"x" * 5000: 1})
    assert caught.value.path == "filter." + "x" * 80 + "..."


@pytest.mark.parametrize("empty", [None, {}])
def test_no_filter_is_true(empty):
    assert compile_filter(empty) == ("TRUE", [])


def test_exactly_the_limits_are_accepted():
    sql, params = compile_filter({f"k{i}": i for i in range(MAX_CONDITIONS)})
    assert sql.count("metadata @>") == MAX_CONDITIONS
    sql, params = compile_filter({"k": {"$in": list(range(MAX_IN_VALUES))}})
    assert params == ["{" + ",".join(f'"{{\\"k\\": {i}}}"' for i in range(MAX_IN_VALUES)) + "}"]
    compile_filter({"k" * 64: 1, "session_id": "s" * 128})


@pytest.mark.parametrize(
    ("operand", "bound"),
    [
        ("2024-05-01", "2024-05-01T00:00:00Z"),
        ("2024-02-29", "2024-02-29T00:00:00Z"),
        ("2000-02-29", "2000-02-29T00:00:00Z"),
        ("0001-01-01", "0001-01-01T00:00:00Z"),
        ("2024-05-01T10:00Z", "2024-05-01T10:00Z"),
        ("2024-05-01T10:00:00Z", "2024-05-01T10:00:00Z"),
        ("2024-05-01 10:00:00Z", "2024-05-01 10:00:00Z"),
        ("2024-05-01T10:00:00.5+02:00", "2024-05-01T10:00:00.5+02:00"),
        ("2024-05-01T10:00:00.123456789-15:59", "2024-05-01T10:00:00.123456789-15:59"),
        ("2024-05-01T10:00:00+0530", "2024-05-01T10:00:00+0530"),
        ("2024-05-01T10:00:00+05", "2024-05-01T10:00:00+05"),
    ],
)
def test_date_operands_are_passed_as_timestamptz_text(operand, bound):
    sql, params = compile_filter({"created_at": {"$gte": operand}})
    assert (sql, params) == ("(created_at >= %s::timestamptz)", [bound])
    sql, params = compile_filter({"due": {"$lt": operand}})
    assert params == ["due"] * 4 + [bound]


def test_compiled_shapes():
    assert compile_filter({"topic": "billing"}) == (
        "(metadata @> %s::jsonb)",
        ['{"topic": "billing"}'],
    )
    assert compile_filter({"k": {"$exists": False}}) == ("(NOT (metadata ? %s))", ["k"])
    assert compile_filter({"session_id": {"$in": ["a", "b", "a"]}}) == (
        "(session_id = ANY(%s))",
        [["a", "b"]],
    )
    sql, params = compile_filter({"k": {"$in": [1, 1, "1", True]}})
    assert sql == "(metadata @> ANY(%s::jsonb[]))"
    assert params == ['{"{\\"k\\": 1}","{\\"k\\": \\"1\\"}","{\\"k\\": true}"}']
    sql, params = compile_filter({"k": {"$nin": ['a"b\\c']}})
    assert sql == "(NOT (metadata @> ANY(%s::jsonb[])))"
    assert params == ['{"{\\"k\\": \\"a\\\\\\"b\\\\\\\\c\\"}"}']


# Only these words may appear in compiled SQL outside its fixed string literals: the three
# columns, casts, and keywords. Keys and values always travel as parameters.
ALLOWED_WORDS = {
    "metadata",
    "session_id",
    "created_at",
    "jsonb",
    "jsonb_typeof",
    "numeric",
    "timestamptz",
    "timestamp",
    "CASE",
    "WHEN",
    "THEN",
    "END",
    "AND",
    "OR",
    "NOT",
    "AT",
    "TIME",
    "ZONE",
    "ANY",
    "TRUE",
    "s",
}

KEYS = st.from_regex(r"[A-Za-z0-9_.:-]{1,64}", fullmatch=True).filter(
    lambda key: key not in ("session_id", "created_at")
)
TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"))
NUMBERS = st.integers() | st.floats(allow_nan=False, allow_infinity=False)
SCALARS = st.none() | st.booleans() | NUMBERS | TEXT
DATES = st.sampled_from(["2024-05-01", "2024-05-01T10:00:00Z", "1999-12-31T23:59:59.5-03:30"])
SCALAR_OPS = st.sampled_from(["$eq", "$ne"])
LIST_OPS = st.sampled_from(["$in", "$nin"])
RANGE_OPS = st.sampled_from(["$gt", "$gte", "$lt", "$lte"])
OPERATORS = st.dictionaries(
    st.one_of(SCALAR_OPS, LIST_OPS, RANGE_OPS, st.just("$exists")), st.none(), min_size=1
).flatmap(
    lambda ops: st.fixed_dictionaries(
        {
            op: (
                SCALARS
                if op in ("$eq", "$ne")
                else st.lists(SCALARS, min_size=1, max_size=5)
                if op in ("$in", "$nin")
                else st.booleans()
                if op == "$exists"
                else NUMBERS | DATES
            )
            for op in ops
        }
    )
)
VALID_FILTERS = st.dictionaries(KEYS, SCALARS | OPERATORS, max_size=6).map(
    lambda spec: (
        spec
        if sum(len(v) if isinstance(v, dict) else 1 for v in spec.values()) <= MAX_CONDITIONS
        else {}
    )
)


def _words_outside_literals(sql: str) -> set[str]:
    return set(re.findall(r"[A-Za-z_][A-Za-z_0-9]*", re.sub(r"'[^']*'", "''", sql)))


@given(VALID_FILTERS, st.none() | TEXT.filter(lambda s: len(s) <= 128))
def test_valid_filters_compile_to_parameterised_sql_on_three_columns(spec, session):
    if session is not None:
        spec = {**spec, "session_id": session, "created_at": {"$lt": "2030-01-01"}}
    sql, params = compile_filter(spec)
    assert sql.count("%s") == len(params)
    assert "%" not in sql.replace("%s", "")
    assert ";" not in sql
    assert _words_outside_literals(sql) <= ALLOWED_WORDS
    for literal in re.findall(r"'[^']*'", sql):
        assert literal in ("'number'", "'UTC'") or literal.startswith("'^(?!0000)")


JSON_ANY = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text()
    | st.sampled_from(["$eq", "$ne", "$in", "$nin", "$gt", "$lt", "$exists", "2024-05-01"]),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.text(max_size=6)
            | st.sampled_from(["$eq", "$ne", "$in", "$nin", "$gt", "$gte", "$exists", "$or"]),
            children,
            max_size=4,
        )
    ),
    max_leaves=20,
)


@given(JSON_ANY)
def test_arbitrary_input_compiles_or_raises_filter_error(spec):
    try:
        sql, params = compile_filter(spec)
    except FilterError as error:
        assert error.path.startswith("filter")
    else:
        assert sql.count("%s") == len(params)


# ---------------------------------------------------------------------------- cost

# The largest filters the language allows: 32 conditions of 100 values, as one key each, as
# $in and $nin on one key, and beside session ids.
LARGEST = {
    "32 keys, $in": {f"k{i}": {"$in": [f"v{j}" for j in range(MAX_IN_VALUES)]} for i in range(32)},
    "16 keys, $in and $nin": {
        f"k{i}": {"$in": list(range(MAX_IN_VALUES)), "$nin": list(range(-MAX_IN_VALUES, 0))}
        for i in range(16)
    },
    "31 keys and session ids": {
        **{f"k{i}": {"$nin": [j + 0.5 for j in range(MAX_IN_VALUES)]} for i in range(31)},
        "session_id": {"$in": [f"s{j}" for j in range(MAX_IN_VALUES)]},
    },
}


@pytest.mark.parametrize("name", list(LARGEST))
def test_the_largest_filters_are_one_parameter_per_condition(name):
    """A list of values is one array parameter: the planner weighs one clause per condition,
    not an OR of a hundred (3,200 of them cost it 0.4-0.8 s on an empty scope)."""
    sql, params = compile_filter(LARGEST[name])
    assert len(params) == MAX_CONDITIONS == sql.count("%s")
    assert sql.count(" OR ") == 0


def test_string_values_are_capped_in_all():
    """At most ``MAX_STRING_BYTES`` of string values (UTF-8), metadata values and session ids
    alike, whatever their operators; numbers, booleans and keys do not count."""
    share = MAX_STRING_BYTES // 32
    exactly = {f"k{i}": {"$in": ["é" * (share // 4), "x" * (share // 2)]} for i in range(31)}
    exactly["session_id"] = {"$in": ["s" * 128] * (share // 128)}
    compile_filter(exactly)
    assert (
        sum(len(value.encode()) for condition in exactly.values() for value in condition["$in"])
        == MAX_STRING_BYTES
    )
    over = [
        {**exactly, "session_id": {"$in": ["s" * 128] * (share // 128) + ["s"]}},
        {**exactly, "k0": {"$in": ["é" * (share // 4) + "é", "x" * (share // 2)]}},
        {"k": "x" * (MAX_STRING_BYTES + 1)},
        {"k": {"$ne": "x" * (MAX_STRING_BYTES // 2), "$eq": "y" * (MAX_STRING_BYTES // 2 + 1)}},
        {"a": {"$nin": ["x" * 1000] * 100}, "b": {"$in": ["y" * 1000] * 100}},
    ]
    for spec in over:
        with pytest.raises(FilterError) as caught:
            compile_filter(spec)
        assert caught.value.path == "filter"
        assert caught.value.message == (
            f"too much text: at most {MAX_STRING_BYTES} bytes of string values in all"
        )
    compile_filter({f"k{i}": {"$in": list(range(100))} for i in range(32)})


@pytest.mark.django_db
@pytest.mark.parametrize("mode", ["lexical", "vector", "hybrid"])
def test_a_search_with_the_largest_filter_sends_one_containment_per_condition(owner, mode):
    from django.test.utils import CaptureQueriesContext

    api = owner.client()
    memories = "/api/v1/apps/acme/users/alice/memories"
    added = api.post(memories, {"content": "tomatoes", "metadata": {"k0": "v7"}}, format="json")
    assert added.status_code == 201, added.content
    spec = LARGEST["32 keys, $in"]
    with CaptureQueriesContext(connection) as queries:
        found = api.post(
            f"{memories}/search", {"query": "tomatoes", "mode": mode, "filter": spec}, format="json"
        )
    assert found.status_code == 200, found.content
    filtered = [query["sql"] for query in queries.captured_queries if "@>" in query["sql"]]
    assert filtered
    for sql in filtered:
        assert sql.count("metadata @>") == MAX_CONDITIONS
    over = {**spec, "k0": {"$in": ["x" * MAX_STRING_BYTES]}}
    refused = api.post(f"{memories}/search", {"query": "tomatoes", "filter": over}, format="json")
    assert refused.status_code == 400
    assert refused.json()["error"] == {
        "code": "validation_error",
        "message": f"filter: too much text: at most {MAX_STRING_BYTES} bytes of string values "
        "in all",
        "details": {"field": "filter"},
    }
