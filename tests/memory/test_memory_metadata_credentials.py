"""A memory's metadata is held to the rule its content is: a key or string value, at any
depth, that looks like it carries a credential is refused (422 ``sensitive_memory_content``,
naming where) and nothing is stored, through every door that adds memory. REST's add and
``memories/events`` are in ``test_memory_api.py`` and ``test_memory_events.py``; here MCP's
``memory_add``."""

from __future__ import annotations

import json

import pytest

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
