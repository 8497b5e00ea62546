"""Invocations end to end with the ``fake`` model: the stored turn, idempotency, a function
call round trip, memory preload, the prefix cache, compaction under token pressure and
durable ingestion; and with a local server speaking Gemini's wire format."""

from __future__ import annotations

import pytest

from caching.adapters import fake_adapter
from caching.models import CacheEntry
from ctxadmin.testing.fake_gemini_cache import FakeGeminiCache
from memory.outbox import worker
from runner import fake_model
from sessions_app.models import Checkpoint, Event, Invocation
from tests.conftest import make_tenant
from tests.sessions_app.test_sessions_schema import check

pytestmark = pytest.mark.django_db(transaction=True)

LONG_INSTRUCTIONS = "You are the travel desk's assistant. " + " ".join(
    f"Rule {i}: answer politely and cite the booking policy section {i}." for i in range(120)
)


@pytest.fixture(autouse=True)
def quiet(monkeypatch, settings):
    """No messages to a broker another test's worker reads: tests drain what they need."""
    from caching.tasks import cleanup
    from memory.tasks import drain_outbox
    from sessions_app.tasks import run_compaction

    for task in (cleanup, drain_outbox, run_compaction):
        monkeypatch.setattr(task, "delay_on_commit", lambda *a, **k: None)
    settings.CTXADMIN_FAKE_MODEL_DELAY_MS = 0
    settings.CTXADMIN_CACHE_FAKE_DELAY_MS = 0
    settings.CTXADMIN_CACHE_FAKE_FAILURE = ""
    fake_adapter().reset()


@pytest.fixture
def requests(monkeypatch):
    """What the fake model was sent, call by call."""
    calls: list[dict] = []
    real = fake_model.generate

    def recording(**kwargs):
        calls.append(kwargs)
        return real(**kwargs)

    monkeypatch.setattr(fake_model, "generate", recording)
    return calls


@pytest.fixture
def acme():
    tenant = make_tenant("acme")
    for user in ("alice", "bob"):
        tenant.client().post(
            f"/api/v1/apps/acme/users/{user}/sessions", {"session_id": "s1"}, format="json"
        )
    return tenant


def _url(user: str = "alice", sid: str = "s1") -> str:
    return f"/api/v1/apps/acme/users/{user}/sessions/{sid}/invocations"


def _body(invocation_id: str, text: str, **extra) -> dict:
    body = {
        "invocation_id": invocation_id,
        "input": {"role": "user", "parts": [{"text": text}]},
        "agent": {"provider": "fake", "model": "fake-1", "instructions": "Be brief."},
        "cache": "off",
    }
    body.update(extra)
    return body


def _invoke(tenant, body, user="alice"):
    return tenant.client().post(_url(user), body, format="json")


def test_an_invocation_stores_the_turn_and_answers_with_accounting(acme, requests):
    answer = _invoke(acme, _body("inv-1", "Hello there"))
    assert answer.status_code == 201, answer.content
    data = answer.json()
    check("Invocation", data)
    assert data["content"]["parts"][0]["text"].startswith("Noted (11 characters")
    assert data["function_calls"] == [] and data["cache"] == {"status": "off"}
    # A first short turn is far from every trigger: no automatic check was queued.
    assert data["compaction"] == {"pre_request_id": None, "queued_id": None}
    assert data["usage"]["input_tokens"] > 0
    assert data["event_ids"] == {"input": "inv-1.input", "output": ["inv-1.model"]}
    events = list(Event.objects.order_by("seq").values_list("event_id", "author"))
    assert events == [("inv-1.input", "user"), ("inv-1.model", "model")]
    row = Invocation.objects.get()
    assert (row.status, row.provider, row.function_calls) == ("completed", "fake", 0)
    assert requests[0]["instructions"] == "Be brief."
    assert requests[0]["contents"][-1] == {"role": "user", "parts": [{"text": "Hello there"}]}


def test_the_same_invocation_id_answers_the_stored_result_and_refuses_another_request(acme):
    first = _invoke(acme, _body("inv-1", "Hello")).json()
    again = _invoke(acme, _body("inv-1", "Hello"))
    assert again.status_code == 200
    assert again.json()["content"] == first["content"]
    assert Event.objects.count() == 2 and Invocation.objects.count() == 1
    other = _invoke(acme, _body("inv-1", "Something else"))
    assert other.status_code == 409
    assert other.json()["error"]["code"] == "invocation_conflict"


def test_a_function_call_round_trip(acme, requests):
    declarations = [{"name": "lookup_booking", "parameters": {"type": "object"}}]
    agent = {"provider": "fake", "model": "fake-1", "declarations": declarations}
    first = _invoke(acme, _body("inv-1", 'call:lookup_booking {"ref": "X1"}', agent=agent))
    call = first.json()["function_calls"][0]
    assert call["name"] == "lookup_booking" and call["args"] == {"ref": "X1"}
    model_event = Event.objects.get(event_id="inv-1.model")
    assert model_event.content["parts"][0]["function_call"]["id"] == call["id"]
    response = {
        "role": "user",
        "parts": [
            {
                "function_response": {
                    "id": call["id"],
                    "name": "lookup_booking",
                    "response": {"status": "confirmed"},
                }
            }
        ],
    }
    second = _invoke(acme, {**_body("inv-2", "", agent=agent), "input": response})
    assert second.status_code == 201, second.content
    assert second.json()["content"]["parts"] == [{"text": "Done: lookup_booking answered."}]
    sent = requests[-1]["contents"]
    assert any("function_call" in p for c in sent for p in c["parts"])
    assert sent[-1] == response


def test_memory_preload_has_the_users_facts_and_never_another_users(acme, requests):
    api = acme.client()
    for user, fact in (("alice", "Alice prefers aisle seats"), ("bob", "Bob prefers window seats")):
        api.post(f"/api/v1/apps/acme/users/{user}/memories", {"content": fact}, format="json")
    answer = _invoke(
        acme, _body("inv-1", "Which seats do I prefer?", memory_retrieval={"mode": "lexical"})
    )
    assert answer.json()["context"]["memory_hits"] == 1
    sent = str(requests[0]["contents"])
    assert "Alice prefers aisle seats" in sent and "Bob prefers" not in sent
    assert "untrusted" in sent


def test_the_second_invocation_hits_the_prefix_cache_and_sends_only_the_rest(acme, requests):
    agent = {"provider": "fake", "model": "fake-1", "instructions": LONG_INSTRUCTIONS}
    cache = {"ttl_ms": 600_000, "min_prefix_tokens": 100}
    first = _invoke(acme, _body("inv-1", "Book Lisbon", agent=agent, cache=cache)).json()
    second = _invoke(acme, _body("inv-2", "And Porto", agent=agent, cache=cache)).json()
    assert first["cache"]["status"] == "created" and second["cache"]["status"] == "hit"
    assert second["usage"]["cached_tokens"] == first["cache"]["cached_tokens"] > 0
    assert fake_adapter().creates == 1 and CacheEntry.objects.filter(state="active").count() == 1
    # With the cache, the instructions are not sent again; the newest input is.
    assert requests[1]["cached_content"] and requests[1]["instructions"] is None
    assert requests[1]["contents"][-1]["parts"][0]["text"] == "And Porto"
    stored = Event.objects.get(event_id="inv-2.model")
    assert stored.custom_metadata["cache"]["status"] == "hit"
    assert stored.usage_metadata["cached_content_token_count"] > 0
    assert LONG_INSTRUCTIONS[:40] not in str(stored.custom_metadata)


def test_token_pressure_compacts_before_the_call_and_the_summary_replaces_old_events(
    acme, requests
):
    policy = {
        "token_threshold": 1500,
        "retain_recent_exchanges": 1,
        "min_reclaim_tokens": 1,
        "summarizer": {"kind": "extractive"},
    }
    put = acme.client().put(
        "/api/v1/apps/acme/users/alice/sessions/s1/compaction-policy", policy, format="json"
    )
    assert put.status_code == 200, put.content
    compacted = None
    filler = " ".join(["the itinerary details are long and repetitive"] * 12)
    for n in range(14):
        text = f"Turn {n}: remember the booking code ZX{n:03d}. {filler}"
        data = _invoke(acme, _body(f"inv-{n}", text)).json()
        compacted = compacted or data["compaction"]["pre_request_id"]
    assert compacted, list(Checkpoint.objects.values_list("status", "reason", "message"))
    sent = requests[-1]["contents"]
    first_text = f"Turn 0: remember the booking code ZX000. {filler}"
    texts = [p.get("text", "") for c in sent for p in c["parts"]]
    assert first_text not in texts  # the old events are behind the summary …
    assert any("ZX000" in t and t != first_text for t in texts)  # … which carries them
    assert Checkpoint.objects.filter(status="active").exists()


def test_durable_ingestion_makes_the_conversation_searchable(acme):
    answer = _invoke(acme, _body("inv-1", "My loyalty number is Quokka-77", ingestion="durable"))
    job_id = answer.json()["ingestion"]["job_id"]
    assert job_id
    worker.drain(job_id, budget_seconds=30)
    found = acme.client().post(
        "/api/v1/apps/acme/users/alice/memories/search",
        {"query": "Quokka-77", "mode": "lexical"},
        format="json",
    )
    assert any("Quokka-77" in hit["content"] for hit in found.json()["hits"])


def test_bad_requests_are_refused_before_anything_is_stored(acme):
    for body, field in (
        ({**_body("inv-1", "x"), "extra": 1}, "extra"),
        (_body("inv-1", "x", agent={"provider": "nowhere", "model": "m"}), "agent.provider"),
        (_body("inv-1", "x", ingestion="sometimes"), "ingestion"),
        (_body("bad id!", "x"), "invocation_id"),
        (_body("inv-1", "x", cache={"ttl_ms": 5}), "cache.ttl_ms"),
    ):
        answer = _invoke(acme, body)
        assert answer.status_code == 400, body
        assert answer.json()["error"]["details"]["field"] == field
    assert Event.objects.count() == 0 and Invocation.objects.count() == 0
    missing = acme.client().post(_url(sid="nope"), _body("inv-1", "x"), format="json")
    assert missing.status_code == 404


def test_gemini_invocations_reuse_the_cache_without_resending_instructions(
    acme, settings, monkeypatch
):
    with FakeGeminiCache() as gemini:
        settings.CTXADMIN_PROVIDERS = {
            "gem": {"kind": "gemini", "base_url": gemini.base_url, "api_key_env": "GEM_KEY"}
        }
        settings.CTXADMIN_GEMINI_BASE_URL = gemini.base_url
        monkeypatch.setenv("GEM_KEY", gemini.api_key)
        monkeypatch.setenv("CTXADMIN_GEMINI_API_KEY", gemini.api_key)
        agent = {
            "provider": "gem",
            "model": "gemini-2.5-flash",
            "instructions": LONG_INSTRUCTIONS * 2,
            "declarations": [{"name": "lookup_booking", "description": "Find a booking."}],
        }
        cache = {"ttl_ms": 600_000}
        first = _invoke(acme, _body("inv-1", "Hi", agent=agent, cache=cache))
        assert first.status_code == 201, first.content
        second = _invoke(acme, _body("inv-2", "Again", agent=agent, cache=cache)).json()
        assert (first.json()["cache"]["status"], second["cache"]["status"]) == ("created", "hit")
        generates = [r for r in gemini.requests if r.path.endswith(":generateContent")]
        assert len(generates) == 2
        for request in generates:
            body = request.json
            assert body["cachedContent"].startswith("cachedContents/")
            assert not {"systemInstruction", "tools", "toolConfig"} & body.keys()
        assert second["usage"]["cached_tokens"] > 0
        assert gemini.creates == 1 and gemini.problems == []


@pytest.mark.parametrize("kind", ["gemini", "openai_compatible", "anthropic"])
def test_a_function_call_round_trip_over_each_wire_format(acme, settings, monkeypatch, kind):
    from ctxadmin.testing.fake_providers import FakeProvider

    with FakeProvider(kind) as provider:
        settings.CTXADMIN_PROVIDERS = {
            "llm": {"kind": kind, "base_url": provider.base_url, "api_key_env": "LLM_KEY"}
        }
        monkeypatch.setenv("LLM_KEY", provider.api_key)
        provider.script(
            provider.function_call("lookup_booking", {"ref": "A1"}, call_id="call-1"),
            provider.success("Your booking A1 is confirmed."),
        )
        agent = {
            "provider": "llm",
            "model": "model-x",
            "instructions": "Be brief.",
            "declarations": [
                {"name": "lookup_booking", "parameters": {"type": "object"}},
            ],
        }
        first = _invoke(acme, _body("inv-1", "Where is my booking?", agent=agent)).json()
        call = first["function_calls"][0]
        assert (call["name"], call["args"], call["id"]) == (
            "lookup_booking",
            {"ref": "A1"},
            "call-1",
        )
        answer = {
            "role": "user",
            "parts": [
                {
                    "function_response": {
                        "id": "call-1",
                        "name": "lookup_booking",
                        "response": {"status": "confirmed"},
                    }
                }
            ],
        }
        second = _invoke(acme, {**_body("inv-2", "", agent=agent), "input": answer})
        assert second.status_code == 201, second.content
        assert second.json()["content"]["parts"] == [{"text": "Your booking A1 is confirmed."}]
        assert provider.problems == []
        sent = provider.requests[-1].json
        assert "lookup_booking" in str(sent) and "confirmed" in str(sent)


@pytest.mark.parametrize(
    ("reply", "status", "code"),
    [
        ("rate", 429, "provider_rate_limited"),
        ("down", 503, "provider_unavailable"),
        ("slow", 504, "provider_timeout"),
    ],
)
def test_provider_failures_map_to_clear_errors_and_keep_the_input(
    acme, settings, monkeypatch, reply, status, code
):
    from ctxadmin.testing.fake_providers import FakeProvider

    with FakeProvider("gemini") as provider:
        settings.CTXADMIN_PROVIDERS = {
            "gem": {"kind": "gemini", "base_url": provider.base_url, "api_key_env": "GEM_KEY"}
        }
        monkeypatch.setenv("GEM_KEY", provider.api_key)
        provider.script(
            {
                "rate": provider.error(429, "slow down: secret prompt", retry_after="7"),
                "down": provider.error(500, "internal: secret prompt"),
                "slow": provider.success("late", delay_s=3),
            }[reply]
        )
        agent = {"provider": "gem", "model": "gemini-2.5-flash"}
        body = _body("inv-1", "Private question", agent=agent, deadline_ms=1000)
        answer = _invoke(acme, body)
        assert answer.status_code == status, answer.content
        assert answer.json()["error"]["code"] == code
        if reply == "rate":
            assert answer["Retry-After"] == "8"
        assert "Private question" not in answer.content.decode()
        assert "secret prompt" not in answer.content.decode()
        assert Event.objects.filter(event_id="inv-1.input").exists()
        assert Invocation.objects.get().status == "failed"
        again = _invoke(acme, body)
        assert again.status_code == 409
        assert again.json()["error"]["code"] == "invocation_failed"


def test_over_the_gemini_wire_compaction_and_memory_reach_the_provider_request(
    acme, settings, monkeypatch
):
    """With a Gemini connection: memory preload and the summary that replaced old turns are
    in the generateContent request the provider receives; no other user's fact is."""
    from ctxadmin.testing.fake_providers import FakeProvider

    api = acme.client()
    for user, fact in (("alice", "Alice prefers aisle seats"), ("bob", "Bob prefers window seats")):
        api.post(f"/api/v1/apps/acme/users/{user}/memories", {"content": fact}, format="json")
    api.put(
        "/api/v1/apps/acme/users/alice/sessions/s1/compaction-policy",
        {"token_threshold": 1500, "retain_recent_exchanges": 1, "min_reclaim_tokens": 1},
        format="json",
    )
    with FakeProvider("gemini") as provider:
        settings.CTXADMIN_PROVIDERS = {
            "gem": {"kind": "gemini", "base_url": provider.base_url, "api_key_env": "GEM_KEY"}
        }
        monkeypatch.setenv("GEM_KEY", provider.api_key)
        agent = {"provider": "gem", "model": "gemini-2.5-flash", "instructions": "Be brief."}
        filler = " ".join(["the itinerary details are long and repetitive"] * 12)
        compacted = None
        for n in range(14):
            body = _body(
                f"inv-{n}",
                f"Turn {n}: which seats do I prefer? Code ZX{n:03d}. {filler}",
                agent=agent,
                memory_retrieval={"mode": "lexical"},
            )
            answer = _invoke(acme, body)
            assert answer.status_code == 201, answer.content
            compacted = compacted or answer.json()["compaction"]["pre_request_id"]
        assert compacted
        assert provider.problems == []
        sent = provider.requests[-1].json
        texts = [p.get("text", "") for c in sent["contents"] for p in c["parts"]]
        first = f"Turn 0: which seats do I prefer? Code ZX000. {filler}"
        assert first not in texts and any("ZX000" in t for t in texts)
        assert any("Alice prefers aisle seats" in t for t in texts)
        assert not any("Bob prefers" in t for t in texts)
        assert sent["systemInstruction"] == {"parts": [{"text": "Be brief."}]}
