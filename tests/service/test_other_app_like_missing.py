"""Another app's object and a missing one look the same to a tenant: the same status, the
same body, and the same statements run for them, in number and in shape (literals aside),
so neither an answer nor its timing tells whether the other app's object exists.

Tried on sessions, events, compactions, memories, artifacts, outbox jobs, cache scopes,
API keys, tool tokens (their routes, and another app's token as a credential) and the app
segment itself."""

from __future__ import annotations

import json
import re
import uuid

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from caching.models import CacheScope
from memory.models import MemoryEntry, OutboxJob
from sessions_app.models import Checkpoint
from tests.cache_helpers import acquire, body, scope
from tests.conftest import make_tenant

pytestmark = pytest.mark.django_db(transaction=True)

AGENT = {"provider": "fake", "model": "fake-1", "declarations": [{"name": "lookup_booking"}]}


@pytest.fixture(autouse=True)
def quiet(monkeypatch):
    from caching.adapters import fake_adapter
    from caching.tasks import cleanup
    from memory.tasks import drain_outbox
    from sessions_app.tasks import run_compaction

    for task in (cleanup, drain_outbox, run_compaction):
        monkeypatch.setattr(task, "delay_on_commit", lambda *a, **k: None)
    fake_adapter().reset()


def url(app: str, rest: str = "", user: str = "alice") -> str:
    return f"/api/v1/apps/{app}/users/{user}{rest}"


def populate(tenant, sid: str, names: tuple[str, str]) -> dict:
    """One of everything in ``sid`` of user alice: events, a compaction, a memory, an
    ingestion job, artifacts, an invocation with a tool token, a cache scope."""
    api, app = tenant.client(), tenant.app.name
    assert api.post(url(app, "/sessions"), {"session_id": sid}, format="json").status_code == 201
    for turn in range(4):
        events = [
            {
                "author": "user",
                "content": {"role": "user", "parts": [{"text": f"ask {turn} " * 30}]},
            },
            {
                "author": "agent",
                "content": {"role": "model", "parts": [{"text": f"say {turn} " * 30}]},
            },
        ]
        api.post(url(app, f"/sessions/{sid}/events"), {"events": events}, format="json")
    compaction = api.post(url(app, f"/sessions/{sid}/compactions"), {}, format="json")
    assert compaction.status_code == 201, compaction.content
    memory = api.post(url(app, "/memories"), {"content": "flies on Tuesdays"}, format="json")
    job = api.post(url(app, "/memories/ingestions"), {"session_id": sid}, format="json")
    for name in names:
        saved = api.generic(
            "POST", url(app, f"/sessions/{sid}/artifacts/{name}"), b"x", content_type="a/b"
        )
        assert saved.status_code == 201, saved.content
    invoked = api.post(
        url(app, f"/sessions/{sid}/invocations"),
        {
            "invocation_id": "inv-1",
            "input": {"role": "user", "parts": [{"text": 'call:lookup_booking {"ref": "A1"}'}]},
            "agent": AGENT,
            "cache": "off",
        },
        format="json",
    )
    assert invoked.status_code == 201, invoked.content
    minted = api.post(
        url(app, f"/sessions/{sid}/invocations/inv-1/tool-tokens"),
        {"tool_name": "lookup_booking", "capabilities": ["identity", "memory_search"]},
        format="json",
    )
    assert minted.status_code == 201, minted.content
    acquire(tenant.app, body(scope("alice")))
    return {
        "checkpoint": compaction.json()["compaction_id"],
        "memory": memory.json()["id"],
        "job": job.json()["job_id"],
        "token": minted.json()["token"],
        "token_prefix": minted.json()["prefix"],
        "scope": CacheScope.objects.get(app=tenant.app).fingerprint,
        "key_prefix": tenant.app.api_keys.get().prefix,
    }


def shape(sql: str) -> str:
    """A statement without its literals: strings, numbers, and lists of them."""
    sql = re.sub(r"'(?:[^']|'')*'", "?", sql)
    sql = re.sub(r"\b\d+(?:\.\d+)?\b", "?", sql)
    return re.sub(r"\?(?:\s*,\s*\?)+", "?", sql)


def observed(client: APIClient, method: str, path: str, data=None):
    with CaptureQueriesContext(connection) as queries:
        answer = getattr(client, method)(path, data, format="json")
    return answer.status_code, answer.json(), [shape(q["sql"]) for q in queries.captured_queries]


def as_if_asked(body, asked: str, instead: str):
    """``body`` with each path segment of ``asked`` that differs from ``instead``'s replaced
    by that one (a ``data`` body's id is compared as sent)."""
    text = json.dumps(body)
    for mine, theirs in zip(asked.split("/"), instead.split("/"), strict=False):
        if mine != theirs and mine:
            text = text.replace(mine, theirs)
    return json.loads(text)


def alike(client: APIClient, method: str, other: str, missing: str, data=None, *, status=404):
    """Each answered once before (so per-process caches and once-a-minute writes are the
    same for both), then compared."""
    for path in (other, missing, other, missing):
        observed(client, method, path, data(path) if callable(data) else data)
    seen = [
        observed(client, method, path, data(path) if callable(data) else data)
        for path in (other, missing)
    ]
    (status_a, body_a, queries_a), (status_b, body_b, queries_b) = seen
    assert queries_a, (method, other)  # the credential's own lookup at least
    assert status_a == status_b == status, (method, other, seen)
    # An answer may name what the request named (a 404 says which session): read with the
    # request's own words swapped, the two answers are the same.
    assert as_if_asked(body_a, other, missing) == body_b, (method, other, body_a, body_b)
    assert queries_a == queries_b, (method, other, queries_a, queries_b)


@pytest.fixture
def world():
    acme, globex = make_tenant("acme"), make_tenant("globex")
    populate(acme, "own", ("mine.txt", "user:mine"))
    return acme, populate(globex, "s1", ("report.txt", "user:notes"))


def test_sessions_events_artifacts_and_state_of_another_app(world):
    acme, _theirs = world
    api = acme.client()
    pairs = [
        ("", "/sessions/s1", "/sessions/zz"),
        ("", "/sessions/s1/events", "/sessions/zz/events"),
        ("", "/sessions/s1/compactions", "/sessions/zz/compactions"),
        ("", "/sessions/s1/state", "/sessions/zz/state"),
        ("", "/sessions/s1/artifacts/report.txt", "/sessions/zz/artifacts/report.txt"),
        ("", "/sessions/own/artifacts/report.txt", "/sessions/own/artifacts/missing.txt"),
        ("", "/sessions/own/artifacts/user:notes", "/sessions/own/artifacts/user:zz"),
        (
            "",
            "/sessions/own/artifacts/user:notes/versions",
            "/sessions/own/artifacts/user:zz/versions",
        ),
    ]
    for _label, other, missing in pairs:
        alike(api, "get", url("acme", other), url("acme", missing))
    alike(api, "delete", url("acme", "/sessions/s1"), url("acme", "/sessions/zz"))
    alike(
        api,
        "delete",
        url("acme", "/sessions/own/artifacts/user:notes"),
        url("acme", "/sessions/own/artifacts/user:zz"),
    )


def test_compactions_memories_jobs_scopes_and_keys_of_another_app_by_id(world):
    acme, theirs = world
    api = acme.client()
    missing_uuid = str(uuid.uuid4())
    alike(
        api,
        "get",
        url("acme", f"/sessions/own/compactions/{theirs['checkpoint']}"),
        url("acme", f"/sessions/own/compactions/{missing_uuid}"),
    )
    for method in ("get", "delete"):
        alike(
            api,
            method,
            url("acme", f"/memories/{theirs['memory']}"),
            url("acme", f"/memories/{missing_uuid}"),
        )
    jobs = "/api/v1/apps/acme/outbox/jobs"
    alike(api, "get", f"{jobs}/{theirs['job']}", f"{jobs}/{missing_uuid}")
    alike(api, "post", f"{jobs}/{theirs['job']}/cancel", f"{jobs}/{missing_uuid}/cancel")
    scopes = "/api/v1/apps/acme/cache/scopes"
    alike(api, "get", f"{scopes}/{theirs['scope']}", f"{scopes}/{'0' * 64}")
    invalidate = "/api/v1/apps/acme/cache/invalidate"
    alike(
        api,
        "post",
        invalidate,
        invalidate + "?",  # the same route; the body names the scope
        lambda path: {"scope_fingerprint": theirs["scope"] if path == invalidate else "0" * 64},
    )
    keys = "/api/v1/apps/acme/keys"
    alike(api, "get", f"{keys}/{theirs['key_prefix']}", f"{keys}/zzzzzzzzzz")
    alike(api, "delete", f"{keys}/{theirs['key_prefix']}", f"{keys}/zzzzzzzzzz")
    # Nothing of theirs changed.
    assert MemoryEntry.objects.filter(pk=theirs["memory"]).exists()
    assert OutboxJob.objects.get(pk=theirs["job"]).phase == "pending"
    assert CacheScope.objects.get(fingerprint=theirs["scope"]).generation == 1
    assert Checkpoint.objects.filter(compaction_id=theirs["checkpoint"]).exists()


def test_requests_naming_another_apps_session_in_their_body_or_path(world):
    acme, theirs = world
    api = acme.client()
    alike(
        api,
        "post",
        url("acme", "/memories/ingestions"),
        url("acme", "/memories/ingestions?"),
        lambda path: {"session_id": "s1" if path.endswith("ingestions") else "zz"},
    )
    current = {"role": "user", "parts": [{"text": "hello"}]}
    alike(
        api,
        "post",
        url("acme", "/sessions/s1/context"),
        url("acme", "/sessions/zz/context"),
        {"current_input": current},
    )
    alike(
        api,
        "post",
        url("acme", "/sessions/s1/invocations"),
        url("acme", "/sessions/zz/invocations"),
        {"invocation_id": "inv-9", "input": current, "agent": AGENT, "cache": "off"},
    )
    alike(
        api,
        "post",
        url("acme", "/sessions/s1/compactions"),
        url("acme", "/sessions/zz/compactions"),
        {"async": True},
    )
    for rest in ("", "/lifecycle"):
        alike(
            api,
            "get",
            f"/dev/v1/context/acme/alice/s1{rest}",
            f"/dev/v1/context/acme/alice/zz{rest}",
        )
        alike(
            api,
            "get",
            f"/dev/v1/context/globex/alice/s1{rest}",
            f"/dev/v1/context/nosuch/alice/s1{rest}",
        )
    jobs = "/dev/v1/outbox/acme/jobs"
    alike(api, "get", f"{jobs}/{theirs['job']}", f"{jobs}/{uuid.uuid4()}")


def test_tool_token_routes_and_another_apps_token_as_a_credential(world):
    acme, theirs = world
    api = acme.client()
    tokens = "/sessions/own/invocations/inv-1/tool-tokens"
    alike(
        api,
        "delete",
        url("acme", f"{tokens}/{theirs['token_prefix']}"),
        url("acme", f"{tokens}/{'z' * len(theirs['token_prefix'])}"),
    )
    # Their live token on our app's routes: our session and a missing one, our app and a
    # missing one, look the same to it.
    tool = APIClient()
    tool.credentials(HTTP_AUTHORIZATION=f"Bearer {theirs['token']}")
    alike(tool, "get", url("acme", "/sessions/own/state"), url("acme", "/sessions/zz/state"))
    alike(tool, "get", "/api/v1/apps/acme/tool-token", "/api/v1/apps/nosuch/tool-token")
    alike(
        tool,
        "get",
        url("acme", "/sessions/own/artifacts/mine.txt"),
        url("acme", "/sessions/own/artifacts/zz.txt"),
    )


def test_the_app_segment_of_another_app_is_a_missing_app(world):
    acme, _theirs = world
    api = acme.client()
    for rest in ("/sessions", "/sessions/s1", "/memories", "/sessions/s1/artifacts/report.txt"):
        alike(api, "get", url("globex", rest), url("nosuch", rest))
    alike(api, "get", "/api/v1/apps/globex/", "/api/v1/apps/nosuch/")
    alike(api, "get", "/api/v1/apps/globex/outbox/stats", "/api/v1/apps/nosuch/outbox/stats")


def test_the_comparison_tells_our_own_object_from_a_missing_one(world):
    acme, _theirs = world
    mine = MemoryEntry.objects.get(app=acme.app).pk
    with pytest.raises(AssertionError):
        alike(
            acme.client(),
            "get",
            url("acme", f"/memories/{mine}"),
            url("acme", f"/memories/{uuid.uuid4()}"),
        )
