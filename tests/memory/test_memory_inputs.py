"""The pure parsers of what a client sends to memory (``memory/inputs.py``): no database."""

from __future__ import annotations

import pytest

from ctxadmin.errors import ServiceError
from memory import facts, inputs


def refused(parse, *args) -> tuple[str, str]:
    with pytest.raises(ServiceError) as caught:
        parse(*args)
    assert caught.value.code == "validation_error" and caught.value.status_code == 400
    return caught.value.details["field"], caught.value.message


def test_a_search_request_has_its_defaults():
    request = inputs.parse_search({"query": "where do I hike"})
    assert (request.mode, request.limit, request.min_score, request.weights) == (
        "hybrid",
        10,
        None,
        None,
    )
    # No filter: the versions valid now, as known now.
    assert (request.filter_sql, request.filter_params) == (facts.CURRENT_SQL, [])


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"query": " "}, "query"),
        ({"query": "x" * (inputs.MAX_QUERY_BYTES + 1)}, "query"),
        ({"query": "a\x00b"}, "query"),
        ({"query": "q", "mode": "fuzzy"}, "mode"),
        ({"query": "q", "limit": 0}, "limit"),
        ({"query": "q", "limit": inputs.MAX_SEARCH_LIMIT + 1}, "limit"),
        ({"query": "q", "limit": True}, "limit"),
        ({"query": "q", "min_score": float("nan")}, "min_score"),
        ({"query": "q", "min_score": "0.5"}, "min_score"),
        ({"query": "q", "min_score": True}, "min_score"),
        ({"query": "q", "min_score": -0.1}, "min_score"),  # hybrid: a fused score, >= 0
        ({"query": "q", "mode": "lexical", "min_score": -1}, "min_score"),  # BM25 >= 0
        ({"query": "q", "mode": "vector", "min_score": 1.01}, "min_score"),  # cosine
        ({"query": "q", "mode": "vector", "min_score": -1.01}, "min_score"),
        ({"query": "q", "weights": {}}, "weights"),
        ({"query": "q", "weights": {"vector": inputs.MAX_WEIGHT + 1}}, "weights.vector"),
        ({"query": "q", "weights": {"lexical": 0, "vector": 0}}, "weights"),
        ({"query": "q", "mode": "lexical", "weights": {"vector": 1}}, "weights"),
        ({"query": "q", "extra": 1}, "extra"),
    ],
)
def test_a_search_request_out_of_bounds_names_its_field(body, field):
    assert refused(inputs.parse_search, body)[0] == field


def test_the_limits_themselves_are_accepted():
    request = inputs.parse_search(
        {
            "query": "é" * (inputs.MAX_QUERY_BYTES // 2),
            "limit": inputs.MAX_SEARCH_LIMIT,
            "weights": {"lexical": 0, "vector": inputs.MAX_WEIGHT},
        }
    )
    assert request.limit == inputs.MAX_SEARCH_LIMIT


@pytest.mark.parametrize("value", [-1, True, "1", 1.5, inputs.MAX_EPOCH + 1])
def test_an_epoch_is_a_non_negative_integer(value):
    assert refused(inputs.parse_epoch, value)[0] == "erasure_epoch"


def test_an_epoch_may_be_absent():
    assert inputs.parse_epoch(None) is None
    assert inputs.parse_epoch(0) == 0 and inputs.parse_epoch(inputs.MAX_EPOCH) == inputs.MAX_EPOCH


def test_metadata_under_secret_names_is_redacted_at_any_depth():
    value = {"api_key": "v", "nested": [{"password": "p", "kept": 1}], "note": "n"}
    assert inputs.redact_metadata(value) == {
        "api_key": inputs.REDACTED,
        "nested": [{"password": inputs.REDACTED, "kept": 1}],
        "note": "n",
    }


def test_a_memory_policy_left_out_takes_its_defaults():
    assert inputs.parse_memory_policy({}) == inputs.DEFAULT_POLICY
    policy = inputs.parse_memory_policy({"default_ttl_seconds": 86400, "retention_days": 1})
    assert (policy.default_ttl_seconds, policy.retention_days) == (86400, 1)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"consent_required": "yes"}, "consent_required"),
        ({"ingestion": "always"}, "ingestion"),
        ({"default_ttl_seconds": inputs.MAX_TTL_SECONDS + 1}, "default_ttl_seconds"),
        ({"retention_days": 0}, "retention_days"),
        ({"default_ttl_seconds": 86399, "retention_days": 1}, "default_ttl_seconds"),
    ],
)
def test_a_memory_policy_out_of_bounds_names_its_field(body, field):
    assert refused(inputs.parse_memory_policy, body)[0] == field


def test_consent_legal_hold_and_erasure_confirmation():
    assert inputs.parse_consent({"granted": False}) is False
    assert refused(inputs.parse_consent, {"granted": 1})[0] == "granted"
    inputs.parse_legal_hold(None)
    inputs.parse_legal_hold({})
    assert refused(inputs.parse_legal_hold, [])[0] == "body"
    assert refused(inputs.parse_legal_hold, {"x": 1})[0] == "x"
    inputs.parse_user_confirmation({"confirm": "erase user alice"}, "alice")
    assert refused(inputs.parse_user_confirmation, {"confirm": "erase user bob"}, "alice")[0] == (
        "confirm"
    )


@pytest.mark.parametrize(
    ("mode", "low", "high"),
    [("lexical", 0, inputs.MAX_BM25_MIN_SCORE), ("vector", -1, 1), ("hybrid", 0, 200)],
)
def test_min_score_takes_its_mode_s_whole_scale(mode, low, high):
    for value in (low, high):
        assert inputs.parse_search({"query": "q", "mode": mode, "min_score": value}).min_score == (
            value
        )
