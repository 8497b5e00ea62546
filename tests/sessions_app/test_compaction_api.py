"""Compaction through the REST API: policies, requests, checkpoints, the context builder,
retention, conflicts, model summarizers against local provider servers, and the automatic
task in a real worker."""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from django.db import connections
from django.test import override_settings

from ctxadmin.testing.fake_providers import FakeProvider
from sessions_app import history as session_history
from sessions_app import services as session_services
from sessions_app.compaction import extractive, policies
from sessions_app.models import Checkpoint, Event, Session
from sessions_app.tasks import run_compaction
from tests.conftest import make_tenant
from tests.sessions_helpers import call, response, sessions_url, text

SESSION = f"{sessions_url('acme')}/s"


def words(n: int, tag: str) -> str:
    return " ".join(f"{tag}{i}" for i in range(n))


@pytest.fixture
def api(owner):
    client = owner.client()
    assert client.post(sessions_url("acme"), {"session_id": "s"}, format="json").status_code == 201
    return client


def append(api, *events, status=201):
    result = api.post(f"{SESSION}/events", {"events": list(events)}, format="json")
    assert result.status_code == status, result.content
    return result.json()


def conversation(api, turns: int, start: int = 1, size: int = 40):
    """``turns`` exchanges (user, model), with event ids u<N>/m<N>."""
    for turn in range(start, start + turns):
        append(
            api,
            text("user", words(size, f"ask{turn}-"), event_id=f"u{turn}"),
            text("agent", words(size, f"reply{turn}-"), event_id=f"m{turn}"),
        )


def set_policy(api, **policy):
    result = api.put(f"{SESSION}/compaction-policy", policy, format="json")
    assert result.status_code == 200, result.content
    return result.json()


def compact(api, status=201, **body):
    result = api.post(f"{SESSION}/compactions", body, format="json")
    assert result.status_code == status, result.content
    return result.json()


def history(api, **policy):
    body = {"current_input": {"role": "user", "parts": [{"text": "now?"}]}}
    if policy:
        body["policy"] = policy
    result = api.post(f"{SESSION}/context", body, format="json")
    assert result.status_code == 200, result.content
    return result.json()


def shape(built) -> list[str]:
    """The history as event ids, and ``S<first>-<last>`` for a summary."""
    out = []
    for item in built["envelope"]["history"]:
        if "checkpoint_id" in item:
            out.append(f"S{item['coverage']['first_seq']}-{item['coverage']['last_seq']}")
        else:
            out.append(item["event_id"])
    return out


@pytest.mark.django_db
class TestPolicies:
    def test_defaults_app_default_and_session_override(self, api):
        assert api.get(f"{SESSION}/compaction-policy").json()["source"] == "default"
        app_url = "/api/v1/apps/acme/compaction-policy"
        put = api.put(app_url, {"token_threshold": 5000}, format="json")
        assert put.status_code == 200 and put.json()["policy"]["token_threshold"] == 5000
        got = api.get(f"{SESSION}/compaction-policy").json()
        assert got["source"] == "app" and got["policy"]["token_threshold"] == 5000
        set_policy(api, event_threshold=10, token_threshold=None)
        got = api.get(f"{SESSION}/compaction-policy").json()
        assert got["source"] == "session" and got["policy"]["event_threshold"] == 10
        assert api.delete(f"{SESSION}/compaction-policy").status_code == 204
        assert api.get(f"{SESSION}/compaction-policy").json()["source"] == "app"
        assert api.delete(app_url).status_code == 204
        assert api.get(app_url).json()["source"] == "default"

    @pytest.mark.parametrize(
        ("body", "field"),
        [
            ({"bogus": 1}, "bogus"),
            ({"token_threshold": None}, "policy"),
            ({"compaction_interval": 2, "overlap_size": 2}, "overlap_size"),
            ({"retain_recent_exchanges": 9, "max_input_events": 3}, "retain_recent_exchanges"),
            ({"timeout_ms": -1}, "timeout_ms"),
            (
                {"summarizer": {"kind": "gemini", "connection": "nope", "model": "m"}},
                "summarizer.connection",
            ),
            ([], "policy"),
        ],
    )
    def test_invalid_policies_are_400_naming_the_problem(self, api, body, field):
        result = api.put(f"{SESSION}/compaction-policy", body, format="json")
        assert result.status_code == 400
        assert result.json()["error"]["details"]["field"] == field
        assert Session.objects.get().compaction_policy is None


@pytest.mark.django_db
class TestManualCompaction:
    def test_precedence_is_reported_and_the_tail_stays_unchanged(self, api):
        set_policy(
            api, token_threshold=50, event_threshold=2, turn_interval=1, retain_recent_exchanges=1
        )
        conversation(api, 5)
        append(api, call("c1", event_id="call"), response("c1", event_id="resp"))
        before = history(api)
        done = compact(api)
        assert done["status"] == "active" and done["trigger"] == "token_threshold"
        after = history(api)
        # The call, its response and the current input are untouched.
        assert shape(after)[-2:] == ["call", "resp"]
        assert after["envelope"]["history"][-2:] == before["envelope"]["history"][-2:]
        assert after["envelope"]["current_input"] == before["envelope"]["current_input"]
        assert shape(after)[0] == f"S1-{done['coverage']['last_seq']}"
        assert after["accounting"]["events"]["hidden_by_compaction"] > 0
        assert done["tokens_after"] < done["tokens_before"]

    def test_the_summary_event_is_adk_shaped_and_the_request_is_idempotent(self, api):
        set_policy(api, token_threshold=10, retain_recent_exchanges=1)
        conversation(api, 5)
        compaction_id = str(uuid.uuid4())
        first = compact(api, compaction_id=compaction_id)
        again = compact(api, status=200, compaction_id=compaction_id)
        assert again == first
        event = Event.objects.get(event_id=first["summary_event_id"])
        compaction = event.actions["compaction"]
        assert set(compaction) == {"start_timestamp", "end_timestamp", "compacted_content"}
        assert compaction["start_timestamp"] <= compaction["end_timestamp"]
        assert compaction["compacted_content"]["parts"][0]["text"].startswith("[Summary")
        assert event.custom_metadata == {"checkpoint_id": compaction_id}
        # It is listed for ADK-shaped readers but never sent as history itself.
        assert event.event_id not in shape(history(api))
        listed = api.get(f"{SESSION}/compactions").json()["results"]
        assert [c["compaction_id"] for c in listed] == [compaction_id]
        assert "summary" not in listed[0]
        detail = api.get(f"{SESSION}/compactions/{compaction_id}").json()
        assert detail["summary"]["coverage"] == first["coverage"]

    def test_an_async_request_runs_what_it_asked_for(self, api, django_capture_on_commit_callbacks):
        conversation(api, 4, size=150)
        body = {"async": True, "source_event_ids": ["u1", "m1"], "expected_head": None}
        with django_capture_on_commit_callbacks() as published:
            accepted = compact(api, status=202, **body)
        assert len(published) == 1  # the task is published once the row is committed
        assert accepted["status_url"].endswith(f"/compactions/{accepted['compaction_id']}")
        pending = api.get(f"{SESSION}/compactions/{accepted['compaction_id']}").json()
        assert pending["status"] == "pending"
        key = str(Checkpoint.objects.get(compaction_id=accepted["compaction_id"]).pk)
        assert run_compaction.run(key) == "active"
        assert run_compaction.run(key) == "not_pending"
        done = api.get(f"{SESSION}/compactions/{accepted['compaction_id']}").json()
        assert done["coverage"] == {"first_seq": 1, "last_seq": 2}

    def test_nothing_to_compact(self, api):
        conversation(api, 1)
        error = compact(api, status=422)["error"]
        assert error["code"] == "nothing_to_compact"

    def test_summary_too_large(self, api):
        set_policy(api, token_threshold=10, retain_recent_exchanges=1, max_summary_bytes=64)
        conversation(api, 5)
        assert compact(api, status=422)["error"]["code"] == "summary_too_large"
        assert not Checkpoint.objects.filter(status="active").exists()

    def test_an_ineffective_summary_is_rejected(self, api):
        set_policy(api, token_threshold=10, retain_recent_exchanges=1, min_reclaim_tokens=100000)
        conversation(api, 5)
        assert compact(api, status=422)["error"]["code"] == "ineffective_compaction"

    def test_wrong_prefix_conflicts_with_nothing_changed_then_the_right_one_works(self, api):
        conversation(api, 4)
        events_before = Event.objects.count()
        wrong = compact(api, status=409, source_event_ids=["m1", "u1"])
        assert wrong["error"]["code"] == "compaction_conflict"
        assert Event.objects.count() == events_before
        assert not Checkpoint.objects.filter(status="active").exists()
        right = compact(api, source_event_ids=["u1", "m1", "u2", "m2"])
        assert right["coverage"] == {"first_seq": 1, "last_seq": 4}
        assert shape(history(api)) == ["S1-4", "u3", "m3", "u4", "m4"]

    def test_stale_head(self, api):
        conversation(api, 6, size=150)
        first = compact(api, source_event_ids=["u1", "m1"])
        stale = compact(api, status=409, expected_head=None, source_event_ids=["u2", "m2"])
        assert stale["error"]["code"] == "stale_head"
        assert stale["error"]["details"]["current_head"] == first["compaction_id"]
        second = compact(api, expected_head=first["compaction_id"], source_event_ids=["u2", "m2"])
        assert second["parent_id"] == first["compaction_id"]
        assert api.get(f"{SESSION}/compactions/{first['compaction_id']}").json()["status"] == (
            "superseded"
        )

    def test_a_pending_call_is_never_summarised_and_disjoint_checkpoints_render_in_order(self, api):
        conversation(api, 2)  # seq 1-4
        append(api, call("long", event_id="pending"))  # seq 5: a tool still running
        assert (
            compact(api, status=409, source_event_ids=["u1", "m1", "u2", "m2", "pending"])["error"][
                "code"
            ]
            == "compaction_conflict"
        )
        compact(api, source_event_ids=["u1", "m1", "u2", "m2"])
        conversation(api, 2, start=3)  # seq 6-9
        append(api, text("user", "latest", event_id="u5"))  # seq 10
        compact(api, source_event_ids=["u3", "m3", "u4", "m4"])
        seq = dict(Event.objects.values_list("event_id", "seq"))
        second = f"S{seq['u3']}-{seq['m4']}"
        assert shape(history(api)) == ["S1-4", "pending", second, "u5"]

    def test_a_subsumed_checkpoint_is_hidden(self, api):
        set_policy(api, token_threshold=10, retain_recent_exchanges=1)
        conversation(api, 4)
        first = compact(api)
        conversation(api, 4, start=5)
        second = compact(api)
        assert second["coverage"]["first_seq"] == 1
        detail = api.get(f"{SESSION}/compactions/{first['compaction_id']}").json()
        assert detail["subsumed_by"] == second["compaction_id"]
        built = shape(history(api))
        assert built[0] == f"S1-{second['coverage']['last_seq']}"
        assert sum(1 for entry in built if entry.startswith("S")) == 1

    def test_purge_deletes_exactly_the_covered_source_events(self, api):
        set_policy(api, token_threshold=10, retain_recent_exchanges=1, retention="purge")
        conversation(api, 5)
        done = compact(api)
        covered = set(done["coverage"].values())
        remaining = set(Event.objects.values_list("event_id", flat=True))
        summarised = {f"{k}{i}" for i in range(1, 6) for k in "um"} - remaining
        assert done["purged_events"] == len(summarised) == done["source_event_count"]
        assert done["summary_event_id"] in remaining
        assert {"u5", "m5"} <= remaining  # the retained tail stays
        session = Session.objects.get()
        assert session.event_count == Event.objects.count()
        assert covered

    def test_audit_retention_keeps_sources_left_out_only_without_include_hidden(self, api):
        set_policy(api, token_threshold=10, retain_recent_exchanges=1)
        conversation(api, 5)
        done = compact(api)
        listed = [
            e["event_id"]
            for e in api.get(f"{SESSION}/events?include_hidden=false&limit=100").json()["results"]
        ]
        everything = [
            e["event_id"] for e in api.get(f"{SESSION}/events?limit=100").json()["results"]
        ]
        assert "u1" not in listed and "u1" in everything
        assert done["summary_event_id"] in listed
        assert len(everything) - len(listed) == done["source_event_count"]

    def test_a_response_whose_call_was_compacted_gets_its_call_restored(self, api):
        conversation(api, 2)
        append(api, call("c9", event_id="early-call"))
        conversation(api, 1, start=3)
        # Summarise the first two exchanges while the call is pending ...
        compact(api, source_event_ids=["u1", "m1", "u2", "m2"])
        append(api, response("c9", event_id="late-response"))
        # ... then a checkpoint created directly over the call's range (a pruned one).
        row = Checkpoint.objects.get(status="active")
        Checkpoint.objects.filter(pk=row.pk).update(last_seq=5)
        built = history(api)
        assert "early-call" in shape(built) and "late-response" in shape(built)
        assert shape(built).index("early-call") < shape(built).index("late-response")
        assert built["accounting"]["events"]["restored_calls"] == 1

    def test_context_overflow_compress_compacts_and_fits(self, api):
        set_policy(api, token_threshold=100000, retain_recent_exchanges=1)
        conversation(api, 8, size=60)
        built = history(api, budgets={"max_tokens": 900}, overflow="compress")
        assert built["accounting"]["compaction_id"]
        assert built["accounting"]["events"]["checkpoints"] == 1
        assert shape(built)[0].startswith("S1-")

    def test_compress_reports_a_failed_compaction(self, api):
        conversation(api, 1, size=200)
        body = {
            "current_input": {"role": "user", "parts": [{"text": "x"}]},
            "policy": {"budgets": {"max_tokens": 50}, "overflow": "compress"},
        }
        result = api.post(f"{SESSION}/context", body, format="json")
        assert result.status_code == 422
        error = result.json()["error"]
        assert error["code"] == "compaction_failed"
        assert error["details"]["reason"] == "nothing_to_compact"

    def test_bad_requests(self, api):
        for body, field in [
            ({"nope": 1}, "nope"),
            ({"compaction_id": "x"}, "compaction_id"),
            ({"async": "yes"}, "async"),
            ({"timeout_ms": 0}, "timeout_ms"),
            ({"source_event_ids": []}, "source_event_ids"),
            ({"expected_head": "nope"}, "expected_head"),
        ]:
            result = api.post(f"{SESSION}/compactions", body, format="json")
            assert result.status_code == 400, body
            assert result.json()["error"]["details"]["field"] == field
        bad_id = api.get(f"{SESSION}/compactions/not-a-uuid")
        assert bad_id.status_code == 400
        assert api.get(f"{SESSION}/compactions/{uuid.uuid4()}").status_code == 404

    def test_another_sessions_compaction_id_is_not_reused(self, api, owner):
        conversation(api, 3, size=150)
        compaction_id = str(uuid.uuid4())
        compact(api, compaction_id=compaction_id, source_event_ids=["u1", "m1"])
        api.post(sessions_url("acme"), {"session_id": "t"}, format="json")
        other = api.post(
            f"{sessions_url('acme')}/t/compactions", {"compaction_id": compaction_id}, format="json"
        )
        assert other.status_code == 409
        assert other.json()["error"]["code"] == "compaction_id_taken"
        # And it is not visible through the other session.
        assert api.get(f"{sessions_url('acme')}/t/compactions/{compaction_id}").status_code == 404


@pytest.mark.django_db
class TestAutomaticChecks:
    def run_pending(self):
        pending = Checkpoint.objects.filter(status="pending").values_list("id", flat=True)
        return [run_compaction.run(str(checkpoint_id)) for checkpoint_id in pending]

    def state(self):
        from sessions_app.models import CompactionState

        return CompactionState.objects.get(session=Session.objects.get())

    def test_no_policy_no_automatic_check(self, api, django_capture_on_commit_callbacks):
        with django_capture_on_commit_callbacks() as published:
            conversation(api, 3)
        assert published == [] and not Checkpoint.objects.exists()

    def test_skips_leave_no_row_and_name_their_reason(
        self, api, django_capture_on_commit_callbacks
    ):
        set_policy(api, token_threshold=100000, retain_recent_exchanges=1)
        with django_capture_on_commit_callbacks():
            conversation(api, 1)
            assert self.run_pending() == ["skipped"]
        assert self.state().last_skip_reason == "below_trigger"
        set_policy(api, token_threshold=1, retain_recent_exchanges=1)
        with django_capture_on_commit_callbacks():
            append(api, text("agent", "done", event_id="m-extra"))
            assert self.run_pending() == ["skipped"]
        assert self.state().last_skip_reason == "insufficient_history"
        set_policy(api, token_threshold=1, automatic=False)
        assert not Checkpoint.objects.exists()
        assert self.state().checks == 2

    def test_an_ineffective_result_backs_off(self, api, django_capture_on_commit_callbacks):
        set_policy(api, token_threshold=10, retain_recent_exchanges=1, min_reclaim_tokens=10**6)
        with django_capture_on_commit_callbacks():
            conversation(api, 4)
            assert self.run_pending() == ["failed"]
        state = self.state()
        assert state.ineffective_streak == 1 and state.backoff_until is not None
        with django_capture_on_commit_callbacks():
            conversation(api, 1, start=5)
            assert self.run_pending() == ["skipped"]
        assert self.state().last_skip_reason == "automatic_limit"


@pytest.mark.django_db
class TestSlidingWindow:
    def invocation(self, api, number: int):
        inv = f"inv{number}"
        append(
            api,
            text("user", words(30, f"q{number}-"), event_id=f"u{number}", invocation_id=inv),
            text("agent", words(30, f"a{number}-"), event_id=f"m{number}", invocation_id=inv),
        )

    def run_pending(self):
        pending = Checkpoint.objects.filter(status="pending").values_list("id", flat=True)
        return [run_compaction.run(str(checkpoint_id)) for checkpoint_id in pending]

    def test_interval_two_overlap_one(self, api, django_capture_on_commit_callbacks):
        set_policy(
            api,
            token_threshold=None,
            compaction_interval=2,
            overlap_size=1,
            retain_recent_exchanges=None,
            event_retention_size=1,
        )
        with django_capture_on_commit_callbacks():
            for number in (1, 2):
                self.invocation(api, number)
                self.run_pending()
        first = Checkpoint.objects.get(status="active")
        assert (first.trigger, first.first_seq, first.last_seq) == ("sliding_window", 1, 4)
        with django_capture_on_commit_callbacks():
            for number in (3, 4, 5):
                self.invocation(api, number)
            # One check was queued (the later appends found it in flight), run now.
            assert Checkpoint.objects.filter(status="pending").count() == 1
            self.run_pending()
        second = Checkpoint.objects.get(status="active")
        # inv2 (seq 3-4) is the overlap; the summary event of the first window sits at 5.
        assert (second.first_seq, second.last_seq) == (3, 11)
        assert second.window_end_invocation == "inv5"
        built = shape(history(api))
        assert built == ["S1-4", "S3-11"]


@pytest.mark.django_db
class TestModelSummarizers:
    @pytest.fixture
    def gemini(self):
        with FakeProvider("gemini") as fake:
            providers = {
                "g": {"kind": "gemini", "base_url": fake.base_url, "api_key_env": "FAKE_GEMINI_KEY"}
            }
            with override_settings(CTXADMIN_PROVIDERS=providers):
                yield fake

    def policy(self, api, **extra):
        set_policy(
            api,
            token_threshold=10,
            retain_recent_exchanges=1,
            summarizer={"kind": "gemini", "connection": "g", "model": "gemini-2.5-flash"},
            **extra,
        )

    def expected_summary(self, session) -> str:
        import json

        from sessions_app.compaction import engine, model, planning

        policy, _ = policies.effective_policy(session)
        visible = session_history.visible_checkpoints(session.pk)
        inp = model.EngineInput(
            session_history.source_events(session.pk, visible, policy), [], policy, "manual"
        )
        plan = planning.plan_prefix(inp)
        request = model.SummaryRequest(
            plan.first_seq,
            plan.last_seq,
            plan.events,
            [],
            engine.source_index(plan),
            policy.max_summary_bytes,
            4096,
            time.monotonic() + 5,
        )
        return json.dumps(extractive.summarize(request).summary)

    def test_an_invalid_reply_is_repaired_once(self, api, gemini, monkeypatch):
        monkeypatch.setenv("FAKE_GEMINI_KEY", "fake-provider-key")
        self.policy(api)
        conversation(api, 4)
        good = self.expected_summary(Session.objects.get())
        gemini.script(gemini.success("not json at all"), gemini.success(good))
        done = compact(api)
        assert done["status"] == "active" and done["usage"]["calls"] == 2
        assert len(gemini.requests) == 2 and gemini.problems == []
        assert "invalid_summary" not in str(done)

    def test_deadline_exceeded(self, api, gemini, monkeypatch):
        monkeypatch.setenv("FAKE_GEMINI_KEY", "fake-provider-key")
        self.policy(api)
        conversation(api, 4)
        from ctxadmin.testing.fake_providers import Reply

        gemini.script(Reply(status=200, body=b"{}", delay_s=3.0))
        error = compact(api, status=422, timeout_ms=300)["error"]
        assert error["code"] == "deadline_exceeded"
        assert "ask1" not in error["message"]

    def test_a_provider_error_is_a_summarizer_error_without_content(self, api, gemini, monkeypatch):
        monkeypatch.setenv("FAKE_GEMINI_KEY", "fake-provider-key")
        self.policy(api)
        conversation(api, 4)
        gemini.script(gemini.error(429, retry_after="2"))
        error = compact(api, status=422)["error"]
        assert error["code"] == "summarizer_error" and "ask" not in error["message"]


@pytest.mark.django_db(transaction=True)
def test_an_append_during_compaction_is_kept(monkeypatch):
    tenant = make_tenant("acme")
    api = tenant.client()
    api.post(sessions_url("acme"), {"session_id": "s"}, format="json")
    conversation(api, 5)
    api.put(
        f"{SESSION}/compaction-policy",
        {"token_threshold": 10, "retain_recent_exchanges": 1},
        format="json",
    )

    def appending_summarizer(request):
        def other_writer():
            try:
                session_services.append_events(
                    tenant.app, "alice", "s", [text("user", "meanwhile", event_id="late")]
                )
            finally:
                connections.close_all()

        writer = threading.Thread(target=other_writer)
        writer.start()
        writer.join()
        return extractive.summarize(request)

    monkeypatch.setattr(
        "sessions_app.compaction.summarizers.summarizer_for", lambda spec: appending_summarizer
    )
    done = compact(api)
    assert done["status"] == "active"
    built = shape(history(api))
    assert built[-1] == "late" and built[0].startswith("S1-")
    assert Event.objects.filter(event_id="late").exists()


def test_a_projected_tool_response_is_kept_whole_as_a_session_artifact(api, owner):
    big = {"rows": [f"row {i}: " + "x" * 90 for i in range(200)]}
    append(api, text("user", "find the rows", event_id="u0"))
    append(api, call("c1", event_id="fc1"), response("c1", big, event_id="fr1"))
    append(api, text("agent", "found them", event_id="m0"))
    conversation(api, 3, size=10)
    set_policy(
        api, token_threshold=2000, retain_recent_exchanges=1, project_tool_responses_over_bytes=4096
    )
    checkpoint = compact(api)
    assert checkpoint["status"] == "active", checkpoint
    assert checkpoint["representation"] == "pruned"
    items = [i for i in history(api)["envelope"]["history"] if i.get("event_id") == "fr1"]
    projected = items[0]["content"]["parts"][0]["function_response"]["response"]
    assert projected["projected"] is True
    assert projected["original"] == "artifact:tool-output.fr1.0"
    stored = api.get(f"{SESSION}/artifacts/tool-output.fr1.0")
    assert stored.status_code == 200, stored.content
    assert stored.json()["sha256"] == projected["sha256"]
    assert stored.json()["size"] == projected["bytes"]
    assert stored.json()["custom_metadata"] == {
        "event_id": "fr1",
        "function_call_id": "c1",
        "tool": "lookup",
    }
    import base64
    import json

    assert json.loads(base64.b64decode(stored.json()["data_base64"])) == big
