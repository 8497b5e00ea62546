"""A user's profile over REST: the live keyed memories under the prefixes asked for, in key
order, as fields citing their memory and as one stable block; a field goes when its memory
is superseded, deleted, erased or expired; limits, refusals, tokens and tenancy."""

from __future__ import annotations

import hashlib
from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from memory import profile
from memory.models import MemoryEntry

BASE = "/api/v1/apps/acme/users/alice"


def add(client, content, key=None, user="alice", **extra):
    body = {"content": content, **({"key": key} if key else {}), **extra}
    result = client.post(f"/api/v1/apps/acme/users/{user}/memories", body, format="json")
    assert result.status_code == 201, result.content
    return result.json()


def fetch(client, query="prefix=preference", status=200, base=BASE):
    result = client.get(f"{base}/profile?{query}")
    assert result.status_code == status, result.content
    return result.json()


@pytest.fixture
def api(owner):
    return owner.client()


@pytest.mark.django_db
class TestFields:
    def test_the_live_version_of_each_key_under_a_prefix_in_key_order(self, api):
        add(api, "aisle seat", "preference.seat", valid_from="2026-01-01T00:00:00Z")
        window = add(api, "window seat", "preference.seat", valid_from="2026-06-01T09:00:00Z")
        meal = add(api, "vegetarian meal", "preference.meal")
        add(api, "lives in Lisbon", "home.city")
        add(api, "likes plural keys", "preferences.x")
        add(api, "an unkeyed memory")
        body = fetch(api)
        assert [(f["key"], f["value"]) for f in body["fields"]] == [
            ("preference.meal", "vegetarian meal"),
            ("preference.seat", "window seat"),
        ]
        assert [f["memory_id"] for f in body["fields"]] == [meal["id"], window["id"]]
        assert body["fields"][1]["since"].startswith("2026-06-01T09:00:00")
        assert body["prefixes"] == ["preference"] and body["truncated"] is False
        assert body["sha256"] == hashlib.sha256(body["text"].encode()).hexdigest()
        assert body["bytes"] == len(body["text"].encode())
        assert '<field key="preference.seat" since="2026-06-01">window seat</field>' in body["text"]
        assert "aisle" not in body["text"] and "plural" not in body["text"]

    def test_a_prefix_is_a_whole_key_or_whole_segments(self, api):
        add(api, "window seat", "preference.seat")
        add(api, "tea", "preference")
        add(api, "Lisbon", "home.city")
        keys = [f["key"] for f in fetch(api, "prefix=Preference.Seat&prefix=home")["fields"]]
        assert keys == ["home.city", "preference.seat"]
        assert [f["key"] for f in fetch(api, "prefix=pref")["fields"]] == []
        assert [f["key"] for f in fetch(api, "prefix=preference")["fields"]] == [
            "preference",
            "preference.seat",
        ]

    def test_an_underscore_in_a_prefix_is_not_a_wildcard(self, api):
        add(api, "x", "a_b.c")
        add(api, "y", "axb.c")
        assert [f["key"] for f in fetch(api, "prefix=a_b")["fields"]] == ["a_b.c"]

    def test_the_same_fields_give_the_same_bytes(self, api):
        add(api, "window seat", "preference.seat")
        add(api, 'vegetarian <meal> & "more"', "preference.meal")
        first, second = fetch(api), fetch(api)
        assert first["text"] == second["text"] and first["sha256"] == second["sha256"]
        assert "&lt;meal&gt; &amp;" in first["text"]

    def test_no_field_is_an_empty_block(self, api):
        body = fetch(api)
        assert body["fields"] == [] and body["text"] == "" and body["bytes"] == 0


@pytest.mark.django_db
class TestAFieldDisappears:
    def test_when_its_memory_is_superseded(self, api):
        add(api, "aisle seat", "preference.seat")
        add(api, "window seat", "preference.seat")
        assert [f["value"] for f in fetch(api)["fields"]] == ["window seat"]

    def test_when_its_memory_is_deleted(self, api):
        seat = add(api, "window seat", "preference.seat")
        assert api.delete(f"{BASE}/memories/{seat['id']}").status_code == 204
        assert fetch(api)["fields"] == []

    def test_when_its_session_is_erased(self, api):
        add(api, "window seat", "preference.seat", provenance={"session_id": "s1"})
        assert api.delete(f"{BASE}/memories?session_id=s1").status_code == 200
        assert fetch(api)["fields"] == []

    def test_when_its_user_is_erased(self, api):
        add(api, "window seat", "preference.seat")
        erased = api.delete(f"{BASE}/memories", {"confirm": "erase user alice"}, format="json")
        assert erased.status_code == 200, erased.content
        assert fetch(api)["fields"] == []

    def test_when_its_memory_expires(self, api):
        seat = add(api, "window seat", "preference.seat", ttl_seconds=3600)
        assert len(fetch(api)["fields"]) == 1
        past = timezone.now() - timedelta(seconds=1)
        MemoryEntry.objects.filter(id=seat["id"]).update(expires_at=past)
        assert fetch(api)["fields"] == []


@pytest.mark.django_db
class TestLimits:
    def test_max_fields_cuts_in_key_order(self, api):
        for name in "cab":
            add(api, f"value {name}", f"preference.{name}")
        body = fetch(api, "prefix=preference&max_fields=2")
        assert [f["key"] for f in body["fields"]] == ["preference.a", "preference.b"]
        assert body["truncated"] is True

    def test_max_bytes_bounds_the_block(self, api):
        for name in "abc":
            add(api, f"value {name} " + "x" * 100, f"preference.{name}")
        whole = fetch(api)
        assert len(whole["fields"]) == 3
        cap = whole["bytes"] - 10
        body = fetch(api, f"prefix=preference&max_bytes={cap}")
        assert len(body["fields"]) == 2 and body["truncated"] is True
        assert body["bytes"] <= cap
        assert fetch(api, "prefix=preference&max_bytes=50")["fields"] == []

    @pytest.mark.parametrize(
        ("query", "field"),
        [
            ("", "prefix"),
            ("prefix=Bad..Key", "prefix.0"),
            ("prefix=" + "&prefix=".join(f"k{n}" for n in range(21)), "prefix"),
            ("prefix=a&max_fields=0", "max_fields"),
            ("prefix=a&max_fields=201", "max_fields"),
            ("prefix=a&max_bytes=x", "max_bytes"),
            (f"prefix=a&max_bytes={profile.MAX_PROFILE_BYTES + 1}", "max_bytes"),
        ],
    )
    def test_bad_input_is_refused(self, api, query, field):
        error = fetch(api, query, status=400)["error"]
        assert error["code"] == "validation_error" and error["details"]["field"] == field

    def test_unknown_and_repeated_parameters_are_refused(self, api):
        assert fetch(api, "prefix=a&limit=3", 400)["error"]["code"] == "unknown_parameter"
        assert fetch(api, "prefix=a&max_bytes=1&max_bytes=2", 400)["error"]["code"] == (
            "invalid_parameter"
        )


@pytest.mark.django_db
class TestWhoMayRead:
    def test_another_tenants_app_is_404(self, api, outsider):
        add(api, "window seat", "preference.seat")
        body = fetch(outsider.client(), status=404)
        assert body["error"]["code"] == "not_found"

    def test_a_key_without_the_memory_scope_is_refused(self, owner):
        from ctxadmin.services import create_api_key

        _key, raw = create_api_key(owner.app, ["sessions"], name="sessions only")
        assert fetch(owner.client(raw), status=403)["error"]["code"]

    def test_a_token_reads_its_own_users_profile_with_memory_search(self, api):
        add(api, "window seat", "preference.seat")
        add(api, "aisle seat", "preference.seat", user="bob")

        def token(capabilities):
            minted = api.post(f"{BASE}/tokens", {"capabilities": capabilities}, format="json")
            assert minted.status_code == 201, minted.content
            client = APIClient()
            client.credentials(HTTP_AUTHORIZATION=f"Bearer {minted.json()['token']}")
            return client

        reader = token(["memory_search"])
        assert [f["value"] for f in fetch(reader)["fields"]] == ["window seat"]
        fetch(reader, base="/api/v1/apps/acme/users/bob", status=404)
        fetch(token(["memory_add"]), status=403)
