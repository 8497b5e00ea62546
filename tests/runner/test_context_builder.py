"""The context builder over REST: units, filters, budgets, overflow, pruning, fingerprints."""

from __future__ import annotations

import hashlib
import json

import pytest

from tests.sessions_helpers import call, response, sessions_url, text, user_input

pytestmark = pytest.mark.django_db
CONTEXT = f"{sessions_url('acme')}/s/context"


@pytest.fixture
def api(owner):
    client = owner.client()
    assert client.post(sessions_url("acme"), {"session_id": "s"}, format="json").status_code == 201
    return client


def seed(api, *events):
    result = api.post(f"{sessions_url('acme')}/s/events", {"events": list(events)}, format="json")
    assert result.status_code == 201, result.content


def build(api, status=200, **body):
    body.setdefault("current_input", user_input())
    result = api.post(CONTEXT, body, format="json")
    assert result.status_code == status, result.content
    return result.json()


def history_texts(body):
    out = []
    for item in body["envelope"]["history"]:
        part = item["content"]["parts"][0]
        out.append(part.get("text") or next(iter(part)) + ":" + next(iter(part.values()))["id"])
    return out


def test_everything_fits_by_default(api):
    seed(api, text("user", "hi"), call("c1"), response("c1"), text("agent", "done"))
    body = build(api, instructions="Be brief.", tools=[{"name": "lookup"}])
    assert history_texts(body) == ["hi", "function_call:c1", "function_response:c1", "done"]
    assert body["envelope"]["current_input"] == user_input()
    assert body["envelope"]["instructions"] == "Be brief."
    events = body["accounting"]["events"]
    assert events["input"] == 4 and events["selected"] == 4 and events["dropped"] == 0
    totals = body["accounting"]["bytes"]
    assert totals["total"] == sum(v for k, v in totals.items() if k != "total")
    assert totals["history"] == sum(
        len(json.dumps(i, separators=(",", ":"), sort_keys=True, ensure_ascii=False).encode())
        for i in body["envelope"]["history"]
    )


def test_a_filter_matching_only_tool_responses_drops_the_whole_pair(api):
    seed(api, text("user", "hi"), call("c1"), response("c1"), text("agent", "done"))
    body = build(api, policy={"filters": {"authors": {"exclude": ["tool"]}}})
    assert history_texts(body) == ["hi", "done"]
    assert body["accounting"]["events"]["dropped_by_filter"] == 2
    body = build(api, policy={"filters": {"content_types": {"exclude": ["function_response"]}}})
    assert history_texts(body) == ["hi", "done"]


def test_truncation_with_room_only_for_the_response_drops_the_pair_and_keeps_the_input(api):
    seed(api, call("c1", args={"q": "x" * 200}), response("c1", {"answer": "y"}))
    full = build(api)
    sizes = [
        len(json.dumps(i, separators=(",", ":"), sort_keys=True).encode())
        for i in full["envelope"]["history"]
    ]
    fixed = full["accounting"]["bytes"]["total"] - full["accounting"]["bytes"]["history"] - 2 * 8
    # Room for the response (and its framing) but not for the call as well.
    room = fixed + sizes[1] + 8
    body = build(api, policy={"budgets": {"max_request_bytes": room}, "overflow": "truncate"})
    assert body["envelope"]["history"] == []
    assert body["envelope"]["current_input"] == user_input()
    assert body["accounting"]["truncated"] is True
    assert body["accounting"]["events"]["dropped_by_budget"] == 2
    assert body["accounting"]["bytes"]["total"] <= room


def test_truncation_that_cuts_the_user_turn_drops_the_orphaned_call_unit(api):
    seed(
        api,
        text("user", "look it up " + "q" * 200),
        call("c1"),
        response("c1"),
        text("agent", "done"),
    )
    full = build(api)
    sizes = [
        len(json.dumps(i, separators=(",", ":"), sort_keys=True).encode())
        for i in full["envelope"]["history"]
    ]
    fixed = full["accounting"]["bytes"]["total"] - full["accounting"]["bytes"]["history"] - 4 * 8
    # Room for the call, its response and the answer, not for the user turn that caused them.
    room = fixed + sum(sizes[1:]) + 3 * 8
    body = build(api, policy={"budgets": {"max_request_bytes": room}, "overflow": "truncate"})
    assert history_texts(body) == ["done"]
    assert body["accounting"]["events"]["dropped_by_budget"] == 3
    assert body["accounting"]["bytes"]["history"] == sizes[3]


def test_authors_exclude_all_excludes_every_author(api):
    seed(api, text("user", "hi"), text("all", "from an author named all"), text("agent", "done"))
    body = build(api, policy={"filters": {"authors": {"exclude": ["all"]}}})
    assert body["envelope"]["history"] == []
    assert body["accounting"]["events"]["dropped_by_filter"] == 3
    body = build(api, policy={"filters": {"authors": {"include": ["all"], "exclude": ["tool"]}}})
    assert len(body["envelope"]["history"]) == 3


def test_truncate_keeps_the_newest_units_within_the_history_budget(api):
    seed(api, *[text("user", f"m{i}-" + "z" * 100) for i in range(10)])
    one = build(api)["envelope"]["history"][0]
    size = len(json.dumps(one, separators=(",", ":"), sort_keys=True).encode())
    body = build(api, policy={"budgets": {"max_bytes": size * 3 + 5}, "overflow": "truncate"})
    assert [t.split("-")[0] for t in history_texts(body)] == ["m7", "m8", "m9"]
    assert body["accounting"]["bytes"]["history"] <= size * 3 + 5
    tokens = build(
        api, policy={"budgets": {"max_tokens": (3 * size - 1) // 4}, "overflow": "truncate"}
    )
    assert len(tokens["envelope"]["history"]) == 2


def test_overflow_error_reports_measured_and_limit(api):
    seed(api, *[text("user", "x" * 300) for _ in range(3)])
    body = build(api, status=422, policy={"budgets": {"max_tokens": 50}})
    error = body["error"]
    assert error["code"] == "context_budget_exceeded"
    assert error["details"]["limit_bytes"] == 200 and error["details"]["limit_tokens"] == 50
    assert error["details"]["measured_bytes"] > 900


def test_compress_that_cannot_compact_is_a_documented_422_with_nothing_changed(api):
    seed(api, *[text("user", "x" * 300) for _ in range(3)])
    body = build(api, status=422, policy={"budgets": {"max_bytes": 100}, "overflow": "compress"})
    # Three user events: the last two are always retained, one is too little to summarise.
    assert body["error"]["code"] == "compaction_failed"
    assert body["error"]["details"]["reason"] in {"nothing_to_compact", "ineffective_compaction"}
    fits = build(api, policy={"overflow": "compress"})
    assert len(fits["envelope"]["history"]) == 3
    assert fits["accounting"]["compaction_id"] is None


def test_whole_request_limit_is_checked_before_anything_else(api):
    seed(api, text("user", "hi"))
    body = build(
        api, status=422, instructions="y" * 500, policy={"budgets": {"max_request_bytes": 300}}
    )
    assert body["error"]["code"] == "request_context_budget_exceeded"
    assert body["error"]["details"]["measured_bytes"] > 500
    # Even for a session that does not exist: the request is refused before it is looked up.
    missing = api.post(
        f"{sessions_url('acme')}/nope/context",
        {"current_input": user_input(), "policy": {"budgets": {"max_request_tokens": 1}}},
        format="json",
    )
    assert missing.status_code == 404  # the policy is valid; only then is the session read


def test_current_input_is_always_included_with_all_its_parts(api):
    seed(api, text("user", "old"))
    current = {
        "role": "user",
        "parts": [
            {"text": "look"},
            {"file_data": {"mime_type": "image/png", "file_uri": "gs://b/i.png"}},
        ],
    }
    body = build(
        api, current_input=current, policy={"filters": {"authors": {"include": ["nobody"]}}}
    )
    assert body["envelope"]["current_input"] == current
    assert body["envelope"]["history"] == []


@pytest.mark.parametrize(
    ("policy", "field"),
    [
        ({"budget": {}}, "policy.budget"),
        ({"filters": {"author": {}}}, "policy.filters.author"),
        ({"filters": {"authors": {"only": ["x"]}}}, "policy.filters.authors.only"),
        (
            {"filters": {"authors": {"exclude": ["all", "tool"]}}},
            "policy.filters.authors.exclude",
        ),
        ({"budgets": {"max_bytes": 0}}, "policy.budgets.max_bytes"),
        ({"budgets": {"max_tokens": -5}}, "policy.budgets.max_tokens"),
        ({"budgets": {"bytes_per_token": 0}}, "policy.budgets.bytes_per_token"),
        ({"budgets": {"max_bytes": "10"}}, "policy.budgets.max_bytes"),
        ({"overflow": "drop"}, "policy.overflow"),
        (
            {"filters": {"content_types": {"include": ["video"]}}},
            "policy.filters.content_types.include",
        ),
        (
            {
                "filters": {
                    "timestamp": {"from": "2026-02-01T00:00:00Z", "to": "2026-01-01T00:00:00Z"}
                }
            },
            "policy.filters.timestamp",
        ),
        ({"filters": {"final_only": "yes"}}, "policy.filters.final_only"),
    ],
)
def test_bad_policies_are_400_naming_the_key(api, policy, field):
    body = build(api, status=400, policy=policy)
    assert body["error"]["details"]["field"] == field


def test_unknown_top_level_keys_and_missing_input(api):
    assert build(api, status=400, temperature=1)["error"]["details"]["field"] == "temperature"
    result = api.post(CONTEXT, {"instructions": "x"}, format="json")
    assert result.json()["error"]["details"]["field"] == "current_input"


def test_secrets_never_reach_the_envelope(api):
    secret = "sk-live-SECRET-4242"
    seed(
        api,
        call(
            "c1",
            args={
                "query": "weather",
                "api_key": secret,
                "nested": {"Authorization": f"Bearer {secret}"},
            },
        ),
        response(
            "c1", {"temp": 21, "accessToken": secret, "items": [{"client-secret": secret, "ok": 1}]}
        ),
        text("user", "thanks", actions={"state_delta": {"password": secret, "note": "n"}}),
    )
    current = {
        "role": "user",
        "parts": [
            {"function_response": {"id": "c9", "name": "f", "response": {"session_token": secret}}}
        ],
    }
    body = build(
        api, current_input=current, generation_config={"temperature": 0.2, "apiKey": secret}
    )
    raw = json.dumps(body)
    assert secret not in raw
    history = body["envelope"]["history"]
    assert history[0]["content"]["parts"][0]["function_call"]["args"] == {
        "query": "weather",
        "nested": {},
    }
    assert history[1]["content"]["parts"][0]["function_response"]["response"] == {
        "temp": 21,
        "items": [{"ok": 1}],
    }
    assert history[2]["actions"] == {"state_delta": {"note": "n"}}
    # The owner still reads the stored events as sent.
    stored = api.get(f"{sessions_url('acme')}/s/events").json()["results"]
    assert stored[0]["content"]["parts"][0]["function_call"]["args"]["api_key"] == secret


def test_the_fingerprint_is_the_sha256_of_the_canonical_envelope(api):
    seed(api, text("user", "héllo — ünïcode"), call("c1", args={"b": 1, "a": [{"z": 0, "y": 1}]}))
    body = build(api, instructions="ünï", generation_config={"z": 1, "a": 2}, tools=[{"n": "t"}])
    canonical = json.dumps(
        body["envelope"], sort_keys=True, separators=(",", ":"), ensure_ascii=False
    ).encode()
    assert hashlib.sha256(canonical).hexdigest() == body["context_fingerprint"]


def test_fingerprint_is_deterministic_and_ignores_secret_values_only(api):
    seed(api, call("c1", args={"q": 1, "api_key": "one"}), response("c1"))
    base = {"instructions": "x", "generation_config": {"a": 1, "b": 2}}
    first = build(api, **base)["context_fingerprint"]
    reordered = build(api, instructions="x", generation_config={"b": 2, "a": 1})[
        "context_fingerprint"
    ]
    assert first == reordered
    assert (
        build(api, **{**base, "generation_config": {"a": 1, "b": 2, "api_key": "zzz"}})[
            "context_fingerprint"
        ]
        == first
    )
    assert build(api, **{**base, "instructions": "y"})["context_fingerprint"] != first
    assert (
        build(api, **{**base, "current_input": user_input("other")})["context_fingerprint"] != first
    )


def test_window_of_input_events_never_splits_a_unit(api):
    seed(api, text("user", "a"), call("c1"), response("c1"), text("agent", "b"))
    body = build(api, policy={"budgets": {"max_input_events": 2}})
    assert history_texts(body) == ["b"]
    assert body["accounting"]["events"]["dropped_by_window"] == 3


def test_final_only_and_invocation_filters(api):
    seed(
        api,
        text("user", "q", invocation_id="i1"),
        call("c1", invocation_id="i1"),
        response("c1", invocation_id="i1"),
        text("agent", "a", invocation_id="i1"),
        text("user", "q2", invocation_id="i2"),
    )
    assert history_texts(build(api, policy={"filters": {"final_only": True}})) == ["q", "a", "q2"]
    only = build(api, policy={"filters": {"invocation_ids": {"include": ["i2"]}}})
    assert history_texts(only) == ["q2"]


def test_each_build_emits_content_free_telemetry(api, caplog, client):
    seed(api, text("user", "telemetry-secret-words"), call("c1", args={"q": "more-secret-words"}))
    with caplog.at_level("INFO", logger="ctxadmin.context"):
        body = build(api, instructions="instruction-secret-words")
    [record] = [r for r in caplog.records if r.getMessage() == "context_built"]
    assert record.context_fingerprint == body["context_fingerprint"]
    assert record.events["selected"] == 2
    assert record.bytes["total"] == body["accounting"]["bytes"]["total"]
    from ctxadmin.telemetry import JsonFormatter

    line = JsonFormatter().format(record)
    assert "secret-words" not in line
    metrics = client.get("/metrics").content.decode()
    assert 'ctxadmin_context_builds_total{outcome="ok"}' in metrics
    assert "secret-words" not in metrics
