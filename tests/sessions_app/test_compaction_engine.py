"""The compaction engine, the summary validator and the extractive summarizer (pure)."""

from __future__ import annotations

import copy

import pytest
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from sessions_app.compaction import extractive
from sessions_app.compaction.engine import compact, source_index, summary_item
from sessions_app.compaction.model import (
    CheckpointView,
    EngineInput,
    SummarizerFailed,
    SummaryReply,
    SummaryRequest,
    item_tokens,
    units,
)
from sessions_app.compaction.planning import Plan
from sessions_app.compaction.policy import CompactionPolicy, PolicyError, parse_compaction_policy
from sessions_app.compaction.summary import (
    SummaryInvalid,
    validate_summary,
)
from tests.compaction_helpers import at_path, call, model, response, user

FAR = 1e18  # a deadline that never passes


def run(events, policy=None, visible=(), origin="automatic", summarizer=None, **kw):
    inp = EngineInput(
        events=list(events),
        visible=list(visible),
        policy=policy or CompactionPolicy(token_threshold=100, retain_recent_exchanges=1),
        origin=origin,
        **kw,
    )
    return compact(
        inp, summarizer or extractive.summarize, deadline=kw.pop("deadline", FAR), checkpoint_id="c"
    )


def checkpoint_of(outcome, cid: str, high_water: int = 0) -> CheckpointView:
    return CheckpointView(
        id=cid,
        first_seq=outcome.first_seq,
        last_seq=outcome.last_seq,
        representation=outcome.representation,
        tokens=sum(item_tokens(i, 4) for i in outcome.items),
        summary=outcome.summary,
        trigger=outcome.trigger,
        high_water_seq=high_water,
        window_end_invocation=outcome.window_end_invocation,
    )


def conversation(count: int) -> list:
    events = []
    for seq in range(1, count + 1):
        events.append(user(seq) if seq % 2 else model(seq))
    return events


class TestPolicy:
    def test_defaults_and_round_trip(self):
        policy = parse_compaction_policy({})
        assert policy.token_threshold == 8000 and policy.summarizer.kind == "extractive"
        assert parse_compaction_policy(policy.as_dict()) == policy

    @pytest.mark.parametrize(
        ("body", "path"),
        [
            ({"nope": 1}, "nope"),
            ({"token_threshold": 0}, "token_threshold"),
            ({"token_threshold": -5}, "token_threshold"),
            ({"timeout_ms": 0}, "timeout_ms"),
            ({"token_threshold": None}, "policy"),
            ({"retain_recent_exchanges": 50, "max_input_events": 10}, "retain_recent_exchanges"),
            ({"compaction_interval": 2, "overlap_size": 2}, "overlap_size"),
            ({"retain_recent_exchanges": 2, "event_retention_size": 3}, "event_retention_size"),
            ({"summarizer": {"kind": "gemini"}}, "summarizer.connection"),
            ({"summarizer": {"kind": "extractive", "model": "x"}}, "summarizer.model"),
            ({"summarizer": {"kind": "magic"}}, "summarizer.kind"),
            ({"retention": "forever"}, "retention"),
            ({"automatic": "yes"}, "automatic"),
            ({"token_threshold": True}, "token_threshold"),
        ],
    )
    def test_invalid_policies_name_the_problem(self, body, path):
        with pytest.raises(PolicyError) as error:
            parse_compaction_policy(body)
        assert error.value.path == path

    def test_a_summarizer_must_name_a_configured_connection(self):
        body = {"summarizer": {"kind": "gemini", "connection": "g", "model": "gemini-2.5-flash"}}
        assert (
            parse_compaction_policy(body, connections=frozenset({"g"})).summarizer.connection == "g"
        )
        with pytest.raises(PolicyError):
            parse_compaction_policy(body, connections=frozenset())


class TestDecide:
    def test_trigger_precedence_reports_token_pressure_and_retains_the_last_unit(self):
        events = [*conversation(8), call(9, "c1"), response(10, "c1")]
        policy = CompactionPolicy(
            token_threshold=50, event_threshold=3, turn_interval=1, retain_recent_exchanges=1
        )
        outcome = run(events, policy, current_input_tokens=10)
        assert outcome.status == "compacted", outcome
        assert outcome.trigger == "token_threshold"
        # The call and its response form the retained unit; the two newest user events stay.
        assert "e9" not in outcome.source_event_ids and "e10" not in outcome.source_event_ids
        assert outcome.last_seq == 4  # user 7 and user 5, the last two user events, stay
        assert outcome.tokens_after < outcome.tokens_before

    def test_event_count_wins_over_turns_and_window(self):
        policy = CompactionPolicy(
            token_threshold=10**6, event_threshold=4, turn_interval=1, compaction_interval=1
        )
        assert run(conversation(10), policy).trigger == "event_threshold"

    def test_not_triggered_below_trigger_and_insufficient_history(self):
        off = CompactionPolicy(token_threshold=10, automatic=False)
        assert run(conversation(10), off).reason == "not_triggered"
        high = CompactionPolicy(token_threshold=10**6)
        assert run(conversation(10), high).reason == "below_trigger"
        # Two user events are always retained: nothing before them.
        short = run(conversation(3), CompactionPolicy(token_threshold=1))
        assert (short.status, short.reason) == ("skipped", "insufficient_history")
        # A manual request with nothing to compact is an error, not a skip.
        manual = run(conversation(3), CompactionPolicy(token_threshold=1), origin="manual")
        assert (manual.status, manual.reason) == ("error", "nothing_to_compact")

    def test_automatic_limits(self):
        policy = CompactionPolicy(token_threshold=10, max_automatic_per_hour=2)
        from sessions_app.compaction.model import AutomaticState

        limited = run(conversation(12), policy, automatic=AutomaticState(recent_successes=2))
        assert limited.reason == "automatic_limit"
        backing = run(conversation(12), policy, automatic=AutomaticState(backing_off=True))
        assert backing.reason == "automatic_limit"
        assert run(conversation(12), policy, origin="manual").status == "compacted"

    def test_insufficient_new_tokens(self):
        policy = CompactionPolicy(token_threshold=10, min_new_tokens=10**5)
        first = run(conversation(12), policy)
        assert first.status == "compacted"
        again = run(conversation(14), policy, visible=[checkpoint_of(first, "c1", high_water=12)])
        assert again.reason == "insufficient_new_tokens"


class TestCut:
    def test_a_pending_function_call_is_never_summarised(self):
        events = [*conversation(4), call(5, "open"), *conversation(10)[5:]]
        outcome = run(events, CompactionPolicy(token_threshold=10, retain_recent_exchanges=1))
        assert outcome.status == "compacted"
        assert outcome.last_seq == 4 and "e5" not in outcome.source_event_ids

    def test_a_pending_confirmation_blocks_like_a_call(self):
        events = [
            *conversation(6),
            call(7, "ok?", name="adk_request_confirmation"),
            *[user(s) if s % 2 else model(s) for s in range(8, 16)],
        ]
        outcome = run(events, CompactionPolicy(token_threshold=10, retain_recent_exchanges=1))
        assert outcome.last_seq == 6

    def test_an_answered_call_stays_with_its_response(self):
        events = [user(1), call(2, "c"), model(3), response(4, "c"), *conversation(12)[4:]]
        for retain in range(0, 6):
            policy = CompactionPolicy(token_threshold=10, retain_recent_exchanges=retain)
            outcome = run(events, policy)
            if outcome.status == "compacted":
                ids = set(outcome.source_event_ids)
                assert ("e2" in ids) == ("e4" in ids)

    def test_disjoint_checkpoints_around_an_open_call(self):
        first_events = [user(1), model(2), user(3), model(4), call(5, "long")]
        policy = CompactionPolicy(token_threshold=10, retain_recent_exchanges=0)
        first = run([*first_events, user(6), user(7)], policy)
        assert (first.first_seq, first.last_seq) == (1, 4)
        head = checkpoint_of(first, "c1", high_water=7)
        later = [*first_events, model(6), model(7), model(8), model(9), user(10), user(11)]
        second = run(
            later, CompactionPolicy(token_threshold=10, retain_recent_exchanges=0), visible=[head]
        )
        assert second.status == "compacted", second
        assert (second.first_seq, second.last_seq) == (6, 9)
        assert second.absorbed == ()

    def test_a_new_summary_absorbs_the_previous_one(self):
        policy = CompactionPolicy(token_threshold=4000, retain_recent_exchanges=1)
        first = run(conversation(10), policy, origin="manual")
        head = checkpoint_of(first, "c1", high_water=10)
        second = run(conversation(20), policy, visible=[head], origin="manual")
        assert second.status == "compacted"
        assert second.absorbed == ("c1",) and second.first_seq == 1
        # Lineage: the old requests survive as citations of the new summary.
        old = {r["event_id"] for r in first.summary["user_requests"]}
        assert old <= {r["event_id"] for r in second.summary["user_requests"]}


class TestInputBounds:
    def test_the_range_is_cut_back_to_max_input_events_on_a_unit_boundary(self):
        events = [user(1, "word " * 300), call(2, "c"), response(3, "c"), *conversation(12)[3:]]
        policy = CompactionPolicy(token_threshold=10, retain_recent_exchanges=1, max_input_events=2)
        outcome = run(events, policy)
        assert outcome.status == "compacted"
        assert outcome.source_event_ids == ("e1",)  # the call/response unit would not fit

    def test_a_first_unit_over_the_limit_is_input_too_large(self):
        events = [user(1, "x" * 5000), *conversation(12)[1:]]
        policy = CompactionPolicy(
            token_threshold=10, retain_recent_exchanges=1, max_input_bytes=1000
        )
        outcome = run(events, policy)
        assert (outcome.status, outcome.reason) == ("error", "input_too_large")


class TestSlidingWindow:
    def invocations(self, count: int, start: int = 1):
        events, seq = [], 1
        for number in range(1, count + 1):
            inv = f"inv{number}"
            events += [user(seq, invocation=inv), model(seq + 1, invocation=inv)]
            seq += 2
        return [e for e in events if int(e.invocation_id[3:]) >= start]

    def test_interval_two_overlap_one_over_four_invocations(self):
        policy = CompactionPolicy(
            token_threshold=None, compaction_interval=2, overlap_size=1, retain_recent_exchanges=0
        )
        outcome = run(self.invocations(4), policy)
        assert outcome.trigger == "sliding_window"
        assert (outcome.first_seq, outcome.last_seq) == (1, 8)
        assert outcome.window_end_invocation == "inv4"

    def test_after_a_window_of_one_to_two_three_new_invocations(self):
        policy = CompactionPolicy(
            token_threshold=None, compaction_interval=2, overlap_size=1, retain_recent_exchanges=0
        )
        first = run(self.invocations(2), policy)
        assert (first.first_seq, first.last_seq) == (1, 4)
        head = checkpoint_of(first, "w1", high_water=4)
        # The overlap (inv2) is loaded although covered; inv1 is not.
        second = run(self.invocations(5, start=2), policy, visible=[head])
        assert (second.first_seq, second.last_seq) == (3, 10)
        assert second.window_end_invocation == "inv5"
        assert second.absorbed == ()  # the first window is not inside the second

    def test_fewer_new_invocations_than_the_interval_do_not_fire(self):
        policy = CompactionPolicy(token_threshold=None, compaction_interval=3)
        assert run(self.invocations(2), policy).reason == "below_trigger"


class TestSummarise:
    policy = CompactionPolicy(token_threshold=10, retain_recent_exchanges=1)

    def test_deadline_exceeded(self):
        ticks = iter([0.0, 0.0, 5.0, 5.0, 5.0])
        inp = EngineInput(events=conversation(10), visible=[], policy=self.policy)
        outcome = compact(
            inp, extractive.summarize, deadline=1.0, checkpoint_id="c", clock=lambda: next(ticks)
        )
        assert (outcome.status, outcome.reason) == ("error", "deadline_exceeded")

    def test_summarizer_failure_is_typed(self):
        def broken(request):
            raise SummarizerFailed("summarizer_error", "provider_unavailable (503)")

        outcome = run(conversation(10), self.policy, summarizer=broken)
        assert (outcome.status, outcome.reason) == ("error", "summarizer_error")

    def test_summary_too_large(self):
        policy = CompactionPolicy(
            token_threshold=10, retain_recent_exchanges=1, max_summary_bytes=64
        )
        outcome = run(conversation(10), policy)
        assert (outcome.status, outcome.reason) == ("error", "summary_too_large")

    def test_an_invalid_reply_is_repaired_once(self):
        calls = []

        def flaky(request):
            calls.append(request.repair)
            good = extractive.summarize(request).summary
            if request.repair is None:
                bad = copy.deepcopy(good)
                bad["user_requests"][0]["excerpt"] = "words the user never wrote"
                return SummaryReply(bad, {"input_tokens": 10, "output_tokens": 5})
            return SummaryReply(good, {"input_tokens": 12, "output_tokens": 6})

        outcome = run(conversation(10), self.policy, summarizer=flaky)
        assert outcome.status == "compacted"
        assert calls[0] is None and "exact excerpt" in calls[1][1]
        assert outcome.usage == {"input_tokens": 22, "output_tokens": 11, "calls": 2}

    def test_still_invalid_after_the_repair(self):
        def stubborn(request):
            return SummaryReply({"version": 1})

        outcome = run(conversation(10), self.policy, summarizer=stubborn)
        assert (outcome.status, outcome.reason) == ("error", "invalid_summary")
        assert outcome.usage["calls"] == 2

    def test_an_ineffective_summary_is_rejected(self):
        tiny = [user(1, "a"), model(2, "b"), user(3, "c"), model(4, "d"), user(5, "e")]
        policy = CompactionPolicy(token_threshold=1, retain_recent_exchanges=1)
        outcome = run(tiny, policy)
        assert (outcome.status, outcome.reason) == ("error", "ineffective_compaction")

    def test_projection_alone_prunes_without_a_summarizer(self):
        big = {"rows": ["x" * 100] * 100}
        events = [user(1), call(2, "c"), response(3, "c", big), model(4), *conversation(8)[4:]]
        policy = CompactionPolicy(
            token_threshold=2500, retain_recent_exchanges=1, project_tool_responses_over_bytes=1000
        )

        def never(request):
            raise AssertionError("no summarizer call expected")

        outcome = run(events, policy, summarizer=never)
        assert outcome.trigger == "token_threshold" and outcome.tokens_before >= 2500
        assert outcome.status == "compacted" and outcome.representation == "pruned"
        assert outcome.tokens_after < 2500
        assert outcome.projected == ("e3",)
        projected = outcome.items[2]["content"]["parts"][0]["function_response"]["response"]
        assert projected["projected"] is True
        assert projected["original"] == "artifact:tool-output.e3.0"


class TestSummaryValidation:
    def valid(self):
        events = [
            user(1, "please book a table"),
            call(2, "c", name="book"),
            response(3, "c"),
            model(4, "booked"),
        ]

        plan = Plan(1, 4, events, [])
        source = source_index(plan)
        from sessions_app.compaction.model import SummaryRequest

        request = SummaryRequest(1, 4, events, [], source, 4096, 4096, FAR)
        return extractive.summarize(request).summary, source

    def test_the_extractive_summary_is_valid(self):
        summary, source = self.valid()
        assert validate_summary(summary, source, 4096) == summary
        assert summary["tools"] == ["book"]
        assert summary["user_requests"] == [{"event_id": "e1", "excerpt": "please book a table"}]
        assert "please book a table" in summary_item("c", summary)["content"]["parts"][0]["text"]

    @pytest.mark.parametrize(
        "mutate",
        [
            lambda s: s.update(extra=1),
            lambda s: s.update(version=2),
            lambda s: s["coverage"].update(last_seq=5),
            lambda s: s.update(tools=["book", "other"]),
            lambda s: s.update(tools=[]),
            lambda s: s["user_requests"].append(dict(s["user_requests"][0])),
            lambda s: s["user_requests"][0].update(event_id="e4"),
            lambda s: s["user_requests"][0].update(excerpt="book a room"),
            lambda s: s["progress"]["completed"].append({"text": "x", "source_event_ids": ["e9"]}),
            lambda s: s["progress"]["completed"].append({"text": "x", "source_event_ids": []}),
            lambda s: s["errors"].append({"text": "", "source_event_ids": ["e1"]}),
            lambda s: s["decisions"].append({"text": "x", "source_event_ids": ["e1"], "y": 1}),
            lambda s: s.pop("progress"),
            lambda s: s.update(language="English!"),
        ],
    )
    def test_any_broken_rule_is_rejected(self, mutate):
        summary, source = self.valid()
        broken = copy.deepcopy(summary)
        mutate(broken)
        with pytest.raises(SummaryInvalid):
            validate_summary(broken, source, 4096)

    def test_a_request_with_a_secret_becomes_an_omission(self):
        events = [user(1, "my api_key=sk-live-0123456789abcdefghij please use it"), model(2)]
        from sessions_app.compaction.planning import Plan

        source = source_index(Plan(1, 2, events, []))
        summary = extractive.summarize(SummaryRequest(1, 2, events, [], source, 4096, 4096, FAR))
        assert summary.summary["user_requests"] == [{"event_id": "e1", "omitted": "secret"}]
        assert "sk-live" not in str(summary.summary)
        validate_summary(summary.summary, source, 4096)

    def test_model_and_tool_text_holding_a_credential_is_redacted(self):
        from sessions_app.compaction.planning import Plan

        key = "sk-live-0123456789abcdefghij"
        events = [
            user(1, "check my booking please"),
            call(2, "c1"),
            response(3, "c1", {"note": f"use api_key={key}", "password": "hunter2hunter2"}),
            model(4, f"Done. For the record your api_key={key} works."),
        ]
        source = source_index(Plan(1, 4, events, []))
        made = extractive.summarize(SummaryRequest(1, 4, events, [], source, 4096, 4096, FAR))
        text = str(made.summary)
        assert key not in text and "hunter2" not in text, text
        assert made.summary["progress"]["active"][0]["text"].startswith("Latest answer: Done.")
        assert "[redacted]" in made.summary["progress"]["active"][0]["text"]
        validate_summary(made.summary, source, 4096)
        # A lineage written before redaction is cleaned when absorbed.
        old = copy.deepcopy(made.summary)
        old["progress"]["completed"].append({"text": f"api_key={key}", "source_event_ids": ["e3"]})
        old["artifact_refs"].append({"ref": f"report?token={key}", "source_event_ids": ["e3"]})
        later = [model(5, "Anything else?")]
        absorbed = [CheckpointView("c1", 1, 4, "summary", 0, summary=old)]
        source = source_index(Plan(1, 5, later, absorbed))
        again = extractive.summarize(SummaryRequest(1, 5, later, [old], source, 4096, 4096, FAR))
        assert key not in str(again.summary)
        validate_summary(again.summary, source, 4096)

    def test_a_summary_quoting_a_credential_anywhere_is_rejected_at_its_path(self):
        summary, source = self.valid()
        for path, where in (
            (("objective",), "summary.objective.text"),
            (("progress", "active"), "summary.progress.active[0].text"),
            (("errors",), "summary.errors[0].text"),
        ):
            broken = copy.deepcopy(summary)
            entry = {
                "text": "the agent said api_key=sk-live-0123456789abcdefghij",
                "source_event_ids": ["e1"],
            }
            if path == ("objective",):
                broken["objective"] = entry
            else:
                at_path(broken, path).insert(0, entry)
            with pytest.raises(SummaryInvalid) as caught:
                validate_summary(broken, source, 4096)
            assert caught.value.path == where
            assert "credential" in caught.value.message


@st.composite
def histories_with_tools(draw):
    """Random conversations: user and model turns, calls answered later or never."""
    events, open_calls, seq = [], [], 0
    for _ in range(draw(st.integers(1, 40))):
        seq += 1
        kind = draw(st.sampled_from(["user", "model", "call", "answer"]))
        if kind == "answer" and open_calls:
            call_id = open_calls.pop(draw(st.integers(0, len(open_calls) - 1)))
            events.append(response(seq, call_id))
        elif kind == "call":
            call_id = f"c{seq}"
            open_calls.append(call_id)
            events.append(call(seq, call_id))
        elif kind == "user":
            events.append(user(seq))
        else:
            events.append(model(seq))
    return events


@hypothesis_settings(max_examples=300)
@given(histories_with_tools(), st.integers(0, 6))
def test_a_cut_never_holds_an_open_obligation_nor_splits_a_unit(events, retain):
    from sessions_app.compaction.model import open_obligations
    from sessions_app.compaction.planning import plan_prefix

    policy = CompactionPolicy(token_threshold=1, retain_recent_exchanges=retain)
    plan = plan_prefix(EngineInput(events=events, visible=[], policy=policy))
    if plan is None:
        return
    chosen = {e.event_id for e in plan.events}
    # A contiguous run, in order.
    positions = [i for i, e in enumerate(events) if e.event_id in chosen]
    assert positions == list(range(positions[0], positions[-1] + 1))
    # Nothing open inside, and no call without its response or response without its call.
    assert not {events[i].event_id for i in open_obligations(events)} & chosen
    calls = {c["id"] for e in plan.events for c in e.calls}
    answers = {r["id"] for e in plan.events for r in e.responses}
    assert calls == answers
    # Before it, only units holding an open obligation (kept raw); the two newest user
    # events stay raw too.
    obligations = open_obligations(events)
    for first, last in units(events):
        if first < positions[0]:
            assert last < positions[0] and any(first <= i <= last for i in obligations)
    newest_users = [e.event_id for e in events if e.is_user][-2:]
    assert not set(newest_users) & chosen


@st.composite
def growing_histories(draw):
    """A history and how much of it existed at a first compaction."""
    events = draw(histories_with_tools())
    return events, draw(st.integers(len(events) // 2, len(events)))


def assert_self_contained(events, visible, outcome):
    """The summarised events are a run of the uncovered ones, in order, holding no open
    obligation and no call without its response (nor a response without its call), with
    nothing uncovered before them but units kept raw for an open obligation."""
    raw = [e for e in events if not any(c.first_seq <= e.seq <= c.last_seq for c in visible)]
    ids = [e.event_id for e in raw]
    chosen = list(outcome.source_event_ids)
    begin = ids.index(chosen[0])
    assert ids[begin : begin + len(chosen)] == chosen
    answered = {r["id"] for e in raw for r in e.responses}
    summarised = raw[begin : begin + len(chosen)]
    assert all(c["id"] in answered for e in summarised for c in e.calls)
    assert {c["id"] for e in summarised for c in e.calls} == {
        r["id"] for e in summarised for r in e.responses
    }
    for first, last in units(raw):
        if first < begin:  # kept raw: only for an open obligation, and never half of a unit
            assert last < begin
            assert any(c["id"] not in answered for e in raw[first : last + 1] for c in e.calls)
    assert outcome.summary["coverage"] == {
        "first_seq": outcome.first_seq,
        "last_seq": outcome.last_seq,
    }
    for checkpoint in visible:
        if checkpoint.id in outcome.absorbed:
            assert outcome.first_seq <= checkpoint.first_seq <= checkpoint.last_seq
            assert checkpoint.last_seq < outcome.last_seq


@hypothesis_settings(max_examples=150)
@given(
    growing_histories(),
    st.integers(0, 4),
    st.integers(1, 16) | st.just(5000),
    st.integers(600, 30000) | st.just(4 * 1024 * 1024),
)
def test_a_compacted_range_is_self_contained_through_every_step(
    history, retain, max_events, max_bytes
):
    """What ``compact`` summarises, cut back to ``max_input_events``/``max_input_bytes`` and
    absorbing an earlier checkpoint, keeps the cut's guarantees; its summary is valid."""
    events, first_count = history
    policy = CompactionPolicy(
        token_threshold=1,
        retain_recent_exchanges=retain,
        max_input_events=max(retain, max_events),
        max_input_bytes=max_bytes,
        min_reclaim_tokens=0,
        project_tool_responses_over_bytes=None,
    )
    visible = []
    first = run(events[:first_count], policy, origin="manual")
    if first.status == "compacted":
        assert_self_contained(events[:first_count], [], first)
        visible = [checkpoint_of(first, "c1", high_water=first_count)]
    second = run(events, policy, visible=visible, origin="manual")
    if second.status == "compacted":
        assert_self_contained(events, visible, second)
    else:
        assert second.reason in {"nothing_to_compact", "input_too_large", "ineffective_compaction"}
