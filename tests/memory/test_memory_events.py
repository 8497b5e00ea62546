"""``POST .../memories/events`` as ADK's ``add_events_to_memory`` calls it: the session is
optional (re-sends stay idempotent, keyed by event id in the user's scope) and
``custom_metadata`` rides on every memory made."""

from __future__ import annotations

import pytest

from memory.models import MemoryEntry
from tests.memory.test_memory_api import url


@pytest.fixture
def api(owner):
    return owner.client()


def events() -> list[dict]:
    return [
        {
            "event_id": "e1",
            "author": "user",
            "content": {"role": "user", "parts": [{"text": "I moved to Lisbon in May."}]},
        },
        {
            "event_id": "e2",
            "author": "agent",
            "content": {"role": "model", "parts": [{"text": "Lisbon is lovely in spring."}]},
        },
        {"event_id": "e3", "author": "agent", "actions": {"state_delta": {"city": "x"}}},
    ]


def post(api, body, status=200):
    result = api.post(f"{url()}/events", body, format="json")
    assert result.status_code == status, result.content
    return result.json()


@pytest.mark.django_db
class TestWithoutASession:
    @pytest.mark.parametrize("body", [{}, {"session_id": None}])
    def test_events_become_memories_and_a_re_send_adds_nothing(self, api, body):
        first = post(api, {**body, "events": events()})
        assert (first["added"], first["duplicates"], first["skipped"]) == (2, 0, 1)
        again = post(api, {**body, "events": events()})
        assert (again["added"], again["duplicates"]) == (0, 2)
        assert again["memory_ids"] == first["memory_ids"]
        stored = {entry.event_id: entry for entry in MemoryEntry.objects.all()}
        assert set(stored) == {"e1", "e2"}
        assert stored["e1"].session_id == "" and stored["e1"].idempotency_key == "event:e1"
        got = api.get(f"{url()}/{first['memory_ids'][0]}").json()
        assert got["provenance"] == {
            "session_id": None,
            "event_id": "e1",
            "author": "user",
            "timestamp": None,
        }

    def test_the_same_event_id_in_another_scope_is_another_memory(self, api):
        post(api, {"events": events()})
        other = api.post(url(user="bob") + "/events", {"events": events()}, format="json").json()
        assert other["added"] == 2 and MemoryEntry.objects.count() == 4

    def test_with_a_session_the_key_is_the_session_s_as_before(self, api):
        post(api, {"session_id": "s1", "events": events()})
        keys = set(MemoryEntry.objects.values_list("idempotency_key", flat=True))
        assert keys == {"session:s1:e1", "session:s1:e2"}


@pytest.mark.django_db
class TestCustomMetadata:
    def test_it_is_stored_beside_role_and_source(self, api):
        result = post(
            api,
            {"events": events(), "custom_metadata": {"topic": "travel", "api_key": "sk-x"}},
        )
        entry = api.get(f"{url()}/{result['memory_ids'][0]}").json()
        assert entry["metadata"] == {
            "topic": "travel",
            "api_key": "[redacted]",
            "role": "user",
            "source": "session",
        }

    def test_metadata_holding_a_credential_is_refused_and_nothing_is_added(self, api):
        custom = {"topic": "travel", "note": "token for later: ghp_" + "Zx8" * 12}
        error = post(api, {"events": events(), "custom_metadata": custom}, 422)
        assert error["error"]["code"] == "sensitive_memory_content"
        assert error["error"]["details"] == {"field": "custom_metadata.note"}
        assert "Zx8" not in str(error)
        assert MemoryEntry.objects.count() == 0

    @pytest.mark.parametrize(
        ("custom_metadata", "field"),
        [
            ([], "custom_metadata"),
            ({"role": "admin"}, "custom_metadata.role"),
            ({"source": "x"}, "custom_metadata.source"),
            ({" bad": 1}, "custom_metadata. bad"),
            ({"big": "x" * 20_000}, "custom_metadata"),
        ],
    )
    def test_bad_metadata_is_refused_and_nothing_is_added(self, api, custom_metadata, field):
        error = post(api, {"events": events(), "custom_metadata": custom_metadata}, 400)
        assert error["error"]["code"] == "validation_error"
        assert error["error"]["details"]["field"] == field
        assert MemoryEntry.objects.count() == 0

    def test_a_bad_session_id_is_still_refused(self, api):
        error = post(api, {"session_id": 7, "events": events()}, 400)
        assert error["error"]["details"]["field"] == "session_id"
