"""Extraction through the outbox, drained in this process: the rules extractor and a model
behind a local server speaking the provider's wire format propose operations, the server
checks each answer whole and applies it in one transaction, or refuses it and records why;
an erasure that lands while the model answers leaves nothing of the user behind."""

from __future__ import annotations

import json
import threading

import pytest
from django.db import connection
from django.test import override_settings

from ctxadmin.testing.fake_providers import FakeProvider
from memory.models import ExtractionRun, MemoryEntry
from memory.outbox import worker
from tests.outbox_helpers import admit, job, memories_url
from tests.sessions_helpers import sessions_url, text

RULES = {"kind": "rules"}


@pytest.fixture
def api(owner):
    return owner.client()


def conversation(api, sid: str, turns: list[tuple[str, str]], user: str = "alice") -> None:
    created = api.post(sessions_url("acme", user), {"session_id": sid}, format="json")
    assert created.status_code == 201, created.content
    events = [text(author, words, event_id=f"{sid}-{n}") for n, (author, words) in enumerate(turns)]
    appended = api.post(
        f"{sessions_url('acme', user)}/{sid}/events", {"events": events}, format="json"
    )
    assert appended.status_code == 201, appended.content


def live(app_id: int, user: str = "alice") -> list[tuple[str | None, str]]:
    """The scope's current memories: (key, content), sorted."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT key, content FROM memory_memoryentry WHERE app_id = %s AND user_id = %s "
            "AND valid_to IS NULL ORDER BY key NULLS LAST, content",
            [app_id, user],
        )
        return cursor.fetchall()


@pytest.mark.django_db
class TestRulesExtractor:
    def test_facts_become_keyed_memories_and_a_later_statement_supersedes(self, api, owner):
        conversation(
            api,
            "s1",
            [
                ("user", "Hi! My name is Ana. I live in Porto and I love trams."),
                ("agent", "Nice to meet you, Ana. Porto is lovely."),
                ("user", "If I won the lottery I would live on Mars, lol."),
            ],
        )
        admitted = admit(api, "acme", "alice", "s1", extractor=RULES).json()
        assert worker.drain() == {"completed": 1}
        status = job(api, "acme", admitted["job_id"])
        assert status["adapter"] == "extraction.v1"
        assert status["phase"] == "completed" and status["cursor"] == 3
        assert status["extraction"] == {
            "extractor": "rules",
            "runs": 1,
            "applied": 1,
            "refused": 0,
            "added": 3,
            "updated": 0,
            "retired": 0,
            "unchanged": 0,
            "input_tokens": 0,
            "output_tokens": 0,
        }
        memories = live(owner.app.pk)
        assert ("identity.name", "Name: Ana") in memories
        assert ("identity.home", "Lives in Porto") in [(k, c) for k, c in memories]
        assert not any("Mars" in content for _key, content in memories)  # a hypothetical
        [run] = ExtractionRun.objects.filter(job_id=admitted["job_id"])
        assert (run.extractor, run.model, run.prompt_version) == ("rules", "rules", "rules.v1")
        assert run.outcome == "applied" and run.added == 3

        conversation(api, "s2", [("user", "Big news: I moved to Lisbon.")])
        admit(api, "acme", "alice", "s2", extractor=RULES)
        assert worker.drain() == {"completed": 1}
        homes = MemoryEntry.objects.filter(app=owner.app, user_id="alice", key="identity.home")
        assert sorted((e.content, e.valid_to is None) for e in homes) == [
            ("Lives in Lisbon", True),
            ("Lives in Porto", False),
        ]
        closed = homes.get(valid_to__isnull=False)
        assert str(closed.superseded_by_id) == str(homes.get(valid_to__isnull=True).pk)

    def test_the_app_policy_names_the_extractor_and_a_request_overrides_it(self, api, owner):
        url = "/api/v1/apps/acme/memory-policy"
        put = api.put(url, {"extractor": RULES}, format="json")
        assert put.status_code == 200, put.content
        assert api.get(url).json()["extractor"] == RULES
        conversation(api, "p1", [("user", "My favourite colour is green.")])
        first = admit(api, "acme", "alice", "p1").json()
        assert job(api, "acme", first["job_id"])["adapter"] == "extraction.v1"
        verbatim = admit(api, "acme", "alice", "p1", extractor={"kind": "none"}).json()
        assert verbatim["job_id"] != first["job_id"]
        assert job(api, "acme", verbatim["job_id"])["extraction"] is None
        assert worker.drain() == {"completed": 2}
        contents = [content for _key, content in live(owner.app.pk)]
        assert "My favourite colour is green." in contents  # the verbatim job's
        assert ("preference.favourite_colour", "Favourite colour: green") in live(owner.app.pk)

    @pytest.mark.parametrize(
        ("extractor", "field"),
        [
            ({"kind": "oracle"}, "extractor.kind"),
            ({"kind": "rules", "model": "x"}, "extractor.model"),
            ({"kind": "openai_compatible", "model": "m"}, "extractor.connection"),
            (
                {"kind": "openai_compatible", "connection": "nowhere", "model": "m"},
                "extractor.connection",
            ),
            (
                {"kind": "gemini", "connection": "fake", "model": "m", "temperature": 1},
                "extractor.temperature",
            ),
            ("rules", "extractor"),
        ],
    )
    def test_a_bad_extractor_is_refused_naming_its_field(self, api, extractor, field):
        conversation(api, "bad", [("user", "My name is Ana.")])
        with override_settings(
            CTXADMIN_PROVIDERS={"fake": {"kind": "gemini", "base_url": "http://127.0.0.1:9"}}
        ):
            refused = admit(api, "acme", "alice", "bad", status=400, extractor=extractor)
            policy = api.put(
                "/api/v1/apps/acme/memory-policy", {"extractor": extractor}, format="json"
            )
        assert refused.json()["error"]["details"]["field"] == field
        assert policy.status_code == 400 and policy.json()["error"]["details"]["field"] == field


def _model_spec(fake) -> dict:
    return {"kind": fake.kind, "connection": "fake", "model": "extract-model"}


@pytest.fixture
def model(monkeypatch):
    """A local OpenAI-compatible server, configured as the provider connection ``fake``."""
    monkeypatch.setenv("EXTRACTION_TEST_KEY", "fake-provider-key")
    with FakeProvider("openai_compatible") as fake:
        providers = {
            "fake": {
                "kind": fake.kind,
                "base_url": fake.base_url,
                "api_key_env": "EXTRACTION_TEST_KEY",
            }
        }
        with override_settings(CTXADMIN_PROVIDERS=providers):
            yield fake


def _answer(*operations) -> str:
    return json.dumps({"operations": list(operations)})


HOSTILE = {
    "not JSON": "Sure! Here are the operations you asked for.",
    "truncated": '{"operations": [{"op": "add", "content": "The user likes ',
    "unknown candidate": _answer(
        {"op": "retire", "candidate": 99, "reason": "gone", "source_event_ids": ["m1-0"]}
    ),
    "foreign event": _answer(
        {
            "op": "add",
            "content": "The user is Bob",
            "reason": "r",
            "source_event_ids": ["other-session-7"],
        }
    ),
    "a credential": _answer(
        {
            "op": "add",
            "content": "api_key=sk-live-abcdefghijklmnopqrstuvwx",
            "reason": "r",
            "source_event_ids": ["m1-0"],
        }
    ),
    "an extra field": _answer(
        {
            "op": "add",
            "content": "The user likes tea",
            "reason": "r",
            "source_event_ids": ["m1-0"],
            "delete_all": True,
        }
    ),
    "one good, one bad": _answer(
        {"op": "add", "content": "The user likes tea", "reason": "r", "source_event_ids": ["m1-0"]},
        {"op": "retire", "candidate": 1, "reason": "r", "source_event_ids": ["m1-0"]},
        {"op": "retire", "candidate": 1, "reason": "again", "source_event_ids": ["m1-0"]},
    ),
}


@pytest.mark.django_db
class TestModelExtractor:
    def test_the_model_sees_the_turns_and_numbered_candidates_and_its_update_lands(
        self, api, owner, model
    ):
        stored = api.post(
            memories_url("acme", "alice"),
            {"content": "The user prefers aisle seats", "key": "preference.seat"},
            format="json",
        )
        assert stored.status_code == 201, stored.content
        conversation(api, "m1", [("user", "Actually I now prefer window seats.")])
        model.script(
            model.success(
                _answer(
                    {
                        "op": "update",
                        "candidate": 1,
                        "content": "The user prefers window seats",
                        "reason": "the user changed their preference",
                        "source_event_ids": ["m1-0"],
                    }
                ),
                input_tokens=321,
                output_tokens=45,
            )
        )
        admitted = admit(api, "acme", "alice", "m1", extractor=_model_spec(model)).json()
        assert worker.drain() == {"completed": 1}
        assert model.problems == []
        [request] = model.requests
        prompt = request.json["messages"][1]["content"]
        assert (
            '{"content": "The user prefers aisle seats", "key": "preference.seat", "number": 1}'
            in prompt
        )
        assert '"event_id": "m1-0"' in prompt and "window seats" in prompt
        assert request.json["response_format"]["type"] == "json_schema"
        assert live(owner.app.pk) == [("preference.seat", "The user prefers window seats")]
        status = job(api, "acme", admitted["job_id"])["extraction"]
        assert (status["updated"], status["input_tokens"], status["output_tokens"]) == (1, 321, 45)
        [run] = ExtractionRun.objects.filter(job_id=admitted["job_id"])
        assert (run.model, run.prompt_version, run.outcome) == (
            "extract-model",
            "extract.v1",
            "applied",
        )

    @pytest.mark.parametrize("answer", list(HOSTILE.values()), ids=list(HOSTILE))
    def test_a_malformed_or_hostile_answer_changes_nothing_and_is_recorded(
        self, api, owner, model, answer
    ):
        api.post(
            memories_url("acme", "alice"), {"content": "The user lives in Porto"}, format="json"
        )
        before = live(owner.app.pk)
        conversation(api, "m1", [("user", "I like tea, and please forget everything else.")])
        model.script(model.success(answer))
        admitted = admit(api, "acme", "alice", "m1", extractor=_model_spec(model)).json()
        assert worker.drain() == {"completed": 1}
        assert live(owner.app.pk) == before
        [run] = ExtractionRun.objects.filter(job_id=admitted["job_id"])
        assert run.outcome == "refused" and run.error_code and run.added == 0
        assert "sk-live" not in run.error_path and "sk-live" not in run.answer
        status = job(api, "acme", admitted["job_id"])["extraction"]
        assert (status["applied"], status["refused"]) == (0, 1)

    def test_a_provider_failure_retries_the_job_and_an_unknown_connection_fails_it(
        self, api, owner, model
    ):
        conversation(api, "m1", [("user", "My name is Ana.")])
        model.script(model.error(503))
        admitted = admit(api, "acme", "alice", "m1", extractor=_model_spec(model)).json()
        assert worker.drain() == {"retry": 1}
        status = job(api, "acme", admitted["job_id"])
        assert status["error"]["code"] == "provider_unavailable" and status["phase"] == "retry"
        assert live(owner.app.pk) == []
        with override_settings(CTXADMIN_PROVIDERS={}):
            with connection.cursor() as cursor:
                cursor.execute(
                    "UPDATE memory_outboxjob SET due_at = now() WHERE id = %s", [admitted["job_id"]]
                )
            assert worker.drain() == {"failed": 1}
        assert job(api, "acme", admitted["job_id"])["error"]["code"] == "extractor_unavailable"


@pytest.mark.django_db(transaction=True)
def test_an_erasure_while_the_model_answers_leaves_nothing_of_the_user(owner, monkeypatch):
    api = owner.client()
    answering, erased = threading.Event(), threading.Event()

    def respond(request):
        answering.set()
        assert erased.wait(30)
        body = _answer(
            {
                "op": "add",
                "content": "The user is named Ana",
                "reason": "stated",
                "source_event_ids": ["e1-0"],
            }
        )
        return fake.success(body)

    monkeypatch.setenv("EXTRACTION_TEST_KEY", "fake-provider-key")
    with FakeProvider("openai_compatible", responder=respond) as fake:
        providers = {
            "fake": {
                "kind": fake.kind,
                "base_url": fake.base_url,
                "api_key_env": "EXTRACTION_TEST_KEY",
            }
        }
        with override_settings(CTXADMIN_PROVIDERS=providers):
            conversation(api, "e1", [("user", "My name is Ana.")])
            admitted = admit(api, "acme", "alice", "e1", extractor=_model_spec(fake)).json()
            outcome = {}
            drainer = threading.Thread(target=lambda: outcome.update(worker.drain()))
            drainer.start()
            assert answering.wait(30)
            erasure = api.delete(
                memories_url("acme", "alice"), {"confirm": "erase user alice"}, format="json"
            )
            assert erasure.status_code == 200, erasure.content
            erased.set()
            drainer.join(60)
    assert outcome == {"cancelled": 1}
    assert MemoryEntry.objects.filter(app=owner.app, user_id="alice").count() == 0
    assert ExtractionRun.objects.filter(app=owner.app).count() == 0
    status = job(api, "acme", admitted["job_id"])
    assert status["error"]["code"] == "stale_epoch" and status["session_id"] is None


@pytest.mark.django_db
def test_the_runs_are_erased_with_their_user(api, owner):
    conversation(api, "r1", [("user", "My name is Ana.")])
    conversation(api, "r1", [("user", "My name is Bo.")], user="bob")
    admit(api, "acme", "alice", "r1", extractor=RULES)
    admit(api, "acme", "bob", "r1", extractor=RULES)
    assert worker.drain() == {"completed": 2}
    assert ExtractionRun.objects.filter(app=owner.app).count() == 2
    erased = api.delete(
        memories_url("acme", "alice"), {"confirm": "erase user alice"}, format="json"
    )
    assert erased.status_code == 200, erased.content
    assert list(ExtractionRun.objects.filter(app=owner.app).values_list("user_id", flat=True)) == [
        "bob"
    ]
    assert live(owner.app.pk, "bob") == [("identity.name", "Name: Bo")]


@pytest.mark.django_db
def test_a_spent_token_budget_defers_the_job_to_the_next_day_and_stats_say_so(api, owner, model):
    conversation(api, "b1", [("user", "My name is Ana.")])
    conversation(api, "b2", [("user", "I live in Porto.")])
    reply = _answer(
        {"op": "add", "content": "The user is Ana", "reason": "r", "source_event_ids": ["b1-0"]}
    )
    model.script(model.success(reply, input_tokens=900, output_tokens=200))
    first = admit(api, "acme", "alice", "b1", extractor=_model_spec(model)).json()
    with override_settings(CTXADMIN_EXTRACTION_TOKENS_PER_APP_DAY=3_000):
        assert worker.drain() == {"completed": 1}  # 1,100 tokens spent of 3,000
        second = admit(api, "acme", "alice", "b2", extractor=_model_spec(model)).json()
        # The next batch may cost its prompt and 2,048 answer tokens: past the budget.
        assert worker.drain() == {"deferred": 1}
        stats = api.get("/api/v1/apps/acme/outbox/stats").json()["extraction"]
    status = job(api, "acme", second["job_id"])
    assert status["phase"] == "retry" and status["attempts"] == 0
    assert status["error"]["code"] == "extraction_budget_exhausted"
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT due_at = date_trunc('day', now(), 'UTC') + interval '1 day' "
            "FROM memory_outboxjob WHERE id = %s",
            [second["job_id"]],
        )
        assert cursor.fetchone()[0] is True
    assert stats == {
        "active_jobs": 1,
        "deferred_for_budget": 1,
        "runs_today": 1,
        "refused_today": 0,
        "tokens_today": 1_100,
        "tokens_per_day": 3_000,
    }
    assert len(model.requests) == 1  # the deferred batch never reached the model
    assert job(api, "acme", first["job_id"])["extraction"]["input_tokens"] == 900
