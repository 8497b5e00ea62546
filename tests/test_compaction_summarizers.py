"""Model-backed summarizers driven by the compaction engine, against local servers speaking
each provider's wire format (no database)."""

from __future__ import annotations

import copy
import json
import time

import pytest
from django.test import override_settings

from ctxadmin.providers import KINDS
from ctxadmin.providers.clients import json_instruction
from ctxadmin.pruning import looks_like_secret
from ctxadmin.testing.fake_providers import FakeProvider, RecordedRequest
from sessions_app.compaction import extractive
from sessions_app.compaction.engine import compact, source_index
from sessions_app.compaction.model import (
    EngineInput,
    SummarizerFailed,
    SummaryReply,
    SummaryRequest,
)
from sessions_app.compaction.planning import Plan
from sessions_app.compaction.policy import CompactionPolicy, SummarizerSpec
from sessions_app.compaction.summarizers import (
    MAX_PROMPT_BYTES,
    PAYLOAD_CHARS,
    SYSTEM,
    build_prompt,
    event_line,
    model_summarizer,
    parse_reply,
    summarizer_for,
)
from sessions_app.compaction.summary import json_schema
from tests.compaction_helpers import call, model, response, user

FAR = 1e18
KEY = "sk-summarizer-test-key"
MODELS = {
    "gemini": "gemini-2.5-flash",
    "openai_compatible": "gpt-4.1-mini",
    "anthropic": "claude-sonnet-4-5",
}
USER_TEXTS = {
    1: "Plan the launch of Project NIMBUS-4471 for May; the budget is forty thousand.",
    5: "Also draft the announcement e-mail for NIMBUS-4471 in a friendly tone.",
    7: "Keep the e-mail under two hundred words, NIMBUS-4471 style.",
    9: "Send me the final draft of NIMBUS-4471 when ready.",
}
POLICY = CompactionPolicy(token_threshold=100, retain_recent_exchanges=1)


def events() -> list:
    return [
        user(1, USER_TEXTS[1]),
        call(2, "c1", "search_docs"),
        response(3, "c1", {"hits": ["NIMBUS-4471 brief", "launch plan"]}, name="search_docs"),
        model(4, "I found the brief and the launch plan for the project."),
        user(5, USER_TEXTS[5]),
        model(6),
        user(7, USER_TEXTS[7]),
        model(8),
        user(9, USER_TEXTS[9]),
        model(10),
    ]


def engine_input() -> EngineInput:
    return EngineInput(events=events(), visible=[], policy=POLICY)


def spec_for(kind: str) -> SummarizerSpec:
    return SummarizerSpec(kind, "fake", MODELS[kind], 2048)


def expected_request(inp: EngineInput) -> SummaryRequest:
    """The request the engine sends its summarizer for ``inp``."""
    seen: list[SummaryRequest] = []

    def capture(request: SummaryRequest) -> SummaryReply:
        seen.append(request)
        return extractive.summarize(request)

    compact(inp, capture, deadline=FAR, checkpoint_id="c")
    return seen[0]


def valid_summary(inp: EngineInput) -> dict:
    return extractive.summarize(expected_request(inp)).summary


def run(fake: FakeProvider, *, timeout_s: float = 5.0, spec: SummarizerSpec | None = None):
    summarizer = model_summarizer(spec or spec_for(fake.kind), fake.connection())
    return compact(
        engine_input(),
        summarizer,
        deadline=time.monotonic() + timeout_s,
        checkpoint_id="c",
    )


def sent(request: RecordedRequest) -> tuple[str, str]:
    """(system, prompt) as the request carried them."""
    body = request.json
    if "contents" in body:
        return (
            body["systemInstruction"]["parts"][0]["text"],
            body["contents"][0]["parts"][0]["text"],
        )
    if body["messages"][0]["role"] == "system":
        return body["messages"][0]["content"], body["messages"][-1]["content"]
    return body["system"], body["messages"][0]["content"]


def sent_schema(kind: str, request: RecordedRequest, schema: dict) -> bool:
    body = request.json
    if kind == "gemini":
        return body["generationConfig"]["responseJsonSchema"] == schema
    if kind == "openai_compatible":
        return body["response_format"]["json_schema"]["schema"] == schema
    return json_instruction(schema) in body["messages"][0]["content"]


@pytest.fixture(params=sorted(KINDS))
def fake(request):
    with FakeProvider(request.param, api_key=KEY) as server:
        yield server


class TestModelSummarizer:
    def test_a_valid_reply_compacts_with_the_providers_usage(self, fake):
        inp = engine_input()
        request = expected_request(inp)
        fake.script(fake.success(json.dumps(valid_summary(inp)), input_tokens=321))
        outcome = run(fake)
        assert outcome.status == "compacted", outcome
        assert outcome.summary == valid_summary(inp)
        assert outcome.usage == {"input_tokens": 321, "output_tokens": 7, "calls": 1}
        assert fake.problems == []
        (recorded,) = fake.requests
        assert recorded.model == MODELS[fake.kind]
        assert sent_schema(fake.kind, recorded, json_schema(request.max_bytes))
        system, prompt = sent(recorded)
        assert system == SYSTEM
        for event_id in outcome.source_event_ids:
            assert f'"event_id":"{event_id}"' in prompt
        assert USER_TEXTS[1] in prompt
        assert 'tools: ["search_docs"]' in prompt
        assert f'coverage: {{"first_seq":1,"last_seq":{outcome.last_seq}}}' in prompt

    @pytest.mark.parametrize("invalid", ["invented_excerpt", "not_json"])
    def test_an_invalid_reply_is_repaired_once(self, fake, invalid):
        inp = engine_input()
        good = valid_summary(inp)
        if invalid == "not_json":
            first = "Here is your summary: it went well."
            error = "summary: must be an object"
        else:
            bad = copy.deepcopy(good)
            bad["user_requests"][0]["excerpt"] = "launch it in December instead"
            first = json.dumps(bad)
            error = "summary.user_requests[0].excerpt: is not an exact excerpt"
        fake.script(fake.success(first), fake.success(json.dumps(good)))
        outcome = run(fake)
        assert outcome.status == "compacted", outcome
        assert outcome.usage == {"input_tokens": 22, "output_tokens": 14, "calls": 2}
        assert fake.problems == []
        assert len(fake.requests) == 2
        _system, first_prompt = sent(fake.requests[0])
        _system, second_prompt = sent(fake.requests[1])
        assert error not in first_prompt
        assert error in second_prompt
        assert "previous reply was rejected" in second_prompt
        expected_echo = first if invalid == "not_json" else "launch it in December instead"
        assert expected_echo in second_prompt

    def test_two_invalid_replies_fail_the_compaction(self, fake):
        fake.script(fake.success("not json"), fake.success("still not json"))
        outcome = run(fake)
        assert outcome.status == "error" and outcome.reason == "invalid_summary"
        assert outcome.usage["calls"] == 2

    @pytest.mark.parametrize(
        ("status", "message"),
        [(429, "provider_rate_limited (429)"), (500, "provider_unavailable (500)")],
    )
    def test_provider_errors_are_summarizer_errors(self, fake, status, message):
        fake.script(fake.error(status, "overloaded", retry_after="2"))
        outcome = run(fake)
        assert outcome.status == "error"
        assert outcome.reason == "summarizer_error"
        assert outcome.message == message
        assert len(fake.requests) == 1  # no repair, no retry

    def test_a_reply_past_the_deadline_is_deadline_exceeded(self, fake):
        fake.script(fake.success(json.dumps(valid_summary(engine_input())), delay_s=3.0))
        started = time.monotonic()
        outcome = run(fake, timeout_s=0.5)
        assert outcome.status == "error"
        assert outcome.reason == "deadline_exceeded"
        assert time.monotonic() - started < 2.5

    def test_a_missing_model_is_a_summarizer_error(self, fake):
        outcome = run(fake, spec=SummarizerSpec(fake.kind, "fake", None))
        assert outcome.reason == "summarizer_error"
        assert fake.requests == []

    @pytest.mark.parametrize("case", ["429", "500", "slow", "invalid_twice"])
    def test_error_messages_carry_no_user_text(self, fake, case):
        echo = " ".join(USER_TEXTS.values())
        replies = {
            "429": [fake.error(429, echo)],
            "500": [fake.error(500, echo)],
            "slow": [fake.success(echo, delay_s=3.0)],
            "invalid_twice": [fake.success(echo), fake.success(json.dumps({"text": echo}))],
        }
        fake.script(*replies[case])
        outcome = run(fake, timeout_s=0.5 if case == "slow" else 5.0)
        assert outcome.status == "error", outcome
        assert outcome.message
        assert "NIMBUS" not in outcome.message
        for text in USER_TEXTS.values():
            assert text not in outcome.message


class TestPrompt:
    def request(self, evs, **overrides) -> SummaryRequest:
        plan = Plan(evs[0].seq, evs[-1].seq, evs, [])
        values = {
            "first_seq": plan.first_seq,
            "last_seq": plan.last_seq,
            "events": evs,
            "lineage": [],
            "source": source_index(plan),
            "max_bytes": 4096,
            "target_bytes": 2048,
            "deadline": FAR,
            **overrides,
        }
        return SummaryRequest(**values)

    def test_event_lines_are_compact_json_with_cut_payloads(self):
        big = {"rows": ["x" * 100] * 100}
        line = json.loads(event_line(response(3, "c1", big, name="fetch")))
        assert line["event_id"] == "e3" and line["author"] == "tool"
        assert line["function_response"]["name"] == "fetch"
        assert isinstance(line["function_response"]["response"], str)
        assert len(line["function_response"]["response"]) == PAYLOAD_CHARS
        assert line["truncated"] is True
        assert json.loads(event_line(call(2, "c1", "fetch")))["function_call"] == {
            "name": "fetch",
            "args": {},
        }
        assert json.loads(event_line(user(1, "hello there"))) == {
            "event_id": "e1",
            "author": "user",
            "role": "user",
            "text": "hello there",
        }

    def test_a_user_request_with_a_credential_is_flagged(self):
        text = "use password: hunter2-Secret to log in"
        assert looks_like_secret(text)
        assert json.loads(event_line(user(1, text)))["contains_credential"] is True
        assert "contains_credential" not in json.loads(event_line(user(2, "log in for me")))

    def test_a_model_or_tool_event_with_a_credential_is_flagged_too(self):
        said = model(1, "Your key is set: api_key=sk-live-0123456789abcdefghij")
        assert json.loads(event_line(said))["contains_credential"] is True
        answered = response(2, "c1", {"note": "Authorization: Bearer abcdefghijklmnop0123"})
        assert json.loads(event_line(answered))["contains_credential"] is True
        assert "contains_credential" not in json.loads(event_line(response(3, "c2", {"ok": 1})))
        assert "[redacted]" in SYSTEM and "No text anywhere in the summary" in SYSTEM

    def test_the_oldest_bodies_go_first_and_every_id_stays(self):
        evs = [user(seq, f"request {seq} " + "y" * 5000) for seq in range(1, 41)]
        prompt = build_prompt(self.request(evs), max_bytes=60_000)
        assert len(prompt.encode()) <= 60_000
        for event in evs:
            assert f'"event_id":"{event.event_id}"' in prompt
        lines = [json.loads(line) for line in prompt.split("<events>\n")[1].split("\n")[:-1]]
        assert lines[0]["body_omitted"] is True and "text" not in lines[0]
        assert lines[-1]["text"] == evs[-1].text

    def test_the_default_bound_holds(self):
        evs = [user(seq, "z" * 15_000) for seq in range(1, 60)]
        prompt = build_prompt(self.request(evs))
        assert len(prompt.encode()) <= MAX_PROMPT_BYTES

    def test_repair_quotes_the_reply_and_the_error(self):
        evs = [user(1, "hello")]
        repair = ({"version": 2}, "summary.version: must be 1")
        prompt = build_prompt(self.request(evs, repair=repair))
        assert '{"version":2}' in prompt and "summary.version: must be 1" in prompt
        assert prompt.index("</events>") < prompt.index("summary.version: must be 1")

    def test_replies_parse_or_stay_text(self):
        assert parse_reply('{"a": 1}') == {"a": 1}
        assert parse_reply('```json\n{"a": 1}\n```') == {"a": 1}
        assert parse_reply("no JSON here") == "no JSON here"


class TestSummarizerFor:
    def test_the_default_spec_is_extractive(self):
        assert summarizer_for(SummarizerSpec()) is extractive.summarize

    @pytest.mark.parametrize(
        "providers",
        [{}, {"fake": {"kind": "anthropic", "base_url": "http://127.0.0.1:9"}}],
        ids=["unknown", "other_kind"],
    )
    def test_an_unusable_connection_fails_when_called(self, providers):
        with override_settings(CTXADMIN_PROVIDERS=providers):
            summarizer = summarizer_for(SummarizerSpec("gemini", "fake", "gemini-2.5-flash"))
        with pytest.raises(SummarizerFailed) as error:
            summarizer(TestPrompt().request([user(1, "hello")]))
        assert error.value.code == "summarizer_error"
        assert str(error.value) == "provider connection unavailable"

    def test_a_configured_connection_is_used(self, fake, monkeypatch):
        monkeypatch.setenv("SUMMARIZER_TEST_KEY", KEY)
        providers = {
            "fake": {
                "kind": fake.kind,
                "base_url": fake.base_url,
                "api_key_env": "SUMMARIZER_TEST_KEY",
            }
        }
        fake.script(fake.success(json.dumps(valid_summary(engine_input()))))
        with override_settings(CTXADMIN_PROVIDERS=providers):
            summarizer = summarizer_for(spec_for(fake.kind))
        outcome = compact(
            engine_input(), summarizer, deadline=time.monotonic() + 5, checkpoint_id="c"
        )
        assert outcome.status == "compacted", outcome
        assert fake.problems == []
