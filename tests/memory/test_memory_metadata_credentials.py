"""A memory's metadata is held to the rule its content is: a key or string value, at any
depth, that looks like it carries a credential is refused (422 ``sensitive_memory_content``,
naming where) and nothing is stored, through every door that adds memory. REST's add and
``memories/events`` are in ``test_memory_api.py`` and ``test_memory_events.py``; here MCP's
``memory_add``, and migration 0016, which redacts what entries stored before held."""

from __future__ import annotations

import importlib
import json

import pytest
from django.apps import apps

from memory.models import MemoryEntry
from tests.conftest import make_tenant
from tests.service.leaks.mcp_flows import mcp_post

pytestmark = pytest.mark.django_db(transaction=True)
STRIPE = "sk_live_" + "51HxQ2cLm7Yt0pVbN3aR"


def memory_add(key: str, arguments: dict) -> dict:
    message = {
        "jsonrpc": "2.0",
        "id": 3,
        "method": "tools/call",
        "params": {"name": "memory_add", "arguments": arguments},
    }
    status, body = mcp_post(key, message)
    assert status == 200, body
    return json.loads(body)["result"]


def test_mcp_memory_add_refuses_metadata_holding_a_credential():
    owner = make_tenant("acme")
    for metadata, field in (
        ({"note": STRIPE}, "metadata.note"),
        ({"trip": {"hotel": ["Lisbon", f"wifi password is {STRIPE}"]}}, "metadata.trip.hotel[1]"),
    ):
        result = memory_add(
            owner.key, {"user_id": "alice", "content": "likes tea", "metadata": metadata}
        )
        assert result["isError"] is True, result
        answer = json.dumps(result)
        assert "sensitive_memory_content" in answer and field in answer, answer
        assert STRIPE not in answer and "51HxQ2" not in answer
    assert MemoryEntry.objects.count() == 0


def test_mcp_memory_add_keeps_ordinary_metadata_whole():
    owner = make_tenant("acme")
    metadata = {"note": "pass the salt", "tags": ["passport", "Mein Passwort ist abgelaufen."]}
    result = memory_add(
        owner.key, {"user_id": "alice", "content": "likes tea", "metadata": metadata}
    )
    assert result["isError"] is False, result
    assert MemoryEntry.objects.get().metadata == metadata


redaction = importlib.import_module("memory.migrations.0016_redact_metadata_credentials")


def test_metadata_stored_before_is_redacted_of_credentials_and_the_rest_left_alone():
    owner = make_tenant("acme")
    for n in range(2):
        result = memory_add(
            owner.key,
            {"user_id": "alice", "content": f"likes tea {n}", "metadata": {"note": "likes tea"}},
        )
        assert result["isError"] is False, result
    first, second = MemoryEntry.objects.order_by("content")
    # As an add stored it before metadata was checked.
    old = {
        "note": f"charge {STRIPE} monthly",
        "tags": ["Lisbon", STRIPE],
        "ghp_" + "Q7w" * 12: "x",
        "ok": 3,
    }
    MemoryEntry.objects.filter(pk=first.pk).update(metadata=old)

    redaction.redact(apps, None)

    assert MemoryEntry.objects.get(pk=first.pk).metadata == {
        "note": "charge [redacted] monthly",
        "tags": ["Lisbon", "[redacted]"],
        "ok": 3,
    }
    assert MemoryEntry.objects.get(pk=second.pk).metadata == {"note": "likes tea"}
