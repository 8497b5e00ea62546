"""A tenant full of things diagnostics must never show: a session whose events, state and
checkpoint carry distinctive text and a credential, memories with distinctive text, a
prefix-cache entry with a known provider resource name, and an ingestion job."""

from __future__ import annotations

import re
from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from rest_framework.test import APIClient

from caching import registry
from caching.adapters import fake_adapter
from caching.models import CacheEntry, CacheScope
from tests.cache_helpers import PREFIX_MARKER, acquire, body, scope
from tests.conftest import Tenant, make_tenant
from tests.sessions_helpers import call, response, sessions_url, text

MARK = "zebra-quartz-diag"
SECRET = "sk-live-SECRET123"
MEMORY_TEXT = f"{MARK} memory: the user hikes on Sundays"
MODEL = "gemini-2.5-flash"
USER = "alice"
SID = "s-1"


@dataclass
class World:
    owner: Tenant
    outsider: Tenant
    checkpoint_id: str
    memory_ids: list[str]
    job_id: str
    lease: str
    resource_name: str
    scope_fingerprint: str

    def forbidden(self) -> list[str]:
        """Strings that must appear in no diagnostics output."""
        return [MARK, SECRET, MEMORY_TEXT, PREFIX_MARKER, self.resource_name, self.owner.key]


def _ok(result, status: int = 201) -> dict:
    assert result.status_code == status, result.content
    return result.json()


def seed_session(client, app: str, user: str = USER, sid: str = SID) -> str:
    """A session with secrets and distinctive text everywhere, compacted once; the id of
    its active checkpoint."""
    base = f"{sessions_url(app, user)}"
    state = {"api_key": SECRET, "note": f"{MARK} state", "user:pref": f"{MARK} pref"}
    _ok(client.post(base, {"session_id": sid, "state": state}, format="json"))
    events = []
    for turn in range(1, 6):
        events.append(text("user", f"{MARK} question {turn} " * 10, event_id=f"u{turn}"))
        events.append(
            text(
                "agent",
                f"{MARK} answer {turn} " * 10,
                event_id=f"m{turn}",
                actions={"state_delta": {"progress": f"{MARK} step {turn}"}},
            )
        )
    events.append(call("c1", args={"query": MARK}, event_id="call-1"))
    events.append(response("c1", {"api_key": SECRET, "result": MARK}, event_id="resp-1"))
    events.append(text("agent", f"{MARK} final words", event_id="last"))
    _ok(client.post(f"{base}/{sid}/events", {"events": events}, format="json"))
    policy = {"token_threshold": 10, "retain_recent_exchanges": 1}
    _ok(client.put(f"{base}/{sid}/compaction-policy", policy, format="json"), 200)
    done = _ok(client.post(f"{base}/{sid}/compactions", {}, format="json"))
    assert done["status"] == "active", done
    return done["compaction_id"]


def seed_memories(client, app: str, user: str = USER) -> list[str]:
    url = f"/api/v1/apps/{app}/users/{user}/memories"
    ids = []
    for n, content in enumerate([MEMORY_TEXT, f"{MARK} likes green tea"]):
        entry = _ok(
            client.post(
                url,
                {"content": content, "metadata": {"topic": f"{MARK}-{n}"}, "embed": "sync"},
                format="json",
            )
        )
        ids.append(entry["id"])
    return ids


def seed_job(client, app: str, user: str = USER, sid: str = SID) -> str:
    url = f"/api/v1/apps/{app}/users/{user}/memories/ingestions"
    return _ok(client.post(url, {"session_id": sid}, format="json"), 202)["job_id"]


def seed_cache(tenant: Tenant, user: str = USER) -> registry.Outcome:
    outcome = acquire(tenant.app, body(scope(user, model=MODEL)))
    assert outcome.status == "created", outcome
    return outcome


def build_world() -> World:
    """Needs ``django_db(transaction=True)`` (a cache create runs outside any transaction)
    and ``quiet_tasks``."""
    owner, outsider = make_tenant("acme"), make_tenant("globex")
    client = owner.client()
    checkpoint_id = seed_session(client, "acme")
    memory_ids = seed_memories(client, "acme")
    job_id = seed_job(client, "acme")
    outcome = seed_cache(owner)
    resource = registry.resolve(owner.app, outcome.lease).resource_name
    return World(
        owner=owner,
        outsider=outsider,
        checkpoint_id=checkpoint_id,
        memory_ids=memory_ids,
        job_id=job_id,
        lease=outcome.lease,
        resource_name=resource,
        scope_fingerprint=outcome.scope_fingerprint,
    )


def assert_seeded(world: World) -> None:
    """The strings a leak test looks for are really stored (so not finding them means
    something): in events, session state, the checkpoint, memory and the cache."""
    from django.db import connection

    checks = [
        ("SELECT count(*) FROM sessions_app_event WHERE content::text LIKE %s", MARK),
        ("SELECT count(*) FROM sessions_app_event WHERE content::text LIKE %s", SECRET),
        ("SELECT count(*) FROM sessions_app_session WHERE state::text LIKE %s", SECRET),
        ("SELECT count(*) FROM sessions_app_checkpoint WHERE items_json LIKE %s", MARK),
        ("SELECT count(*) FROM memory_memoryentry WHERE content LIKE %s", MEMORY_TEXT),
    ]
    with connection.cursor() as cursor:
        for sql, needle in checks:
            cursor.execute(sql, [f"%{needle}%"])
            assert cursor.fetchone()[0] > 0, (sql, needle)
    assert world.resource_name in fake_adapter().resources


CONTEXT = f"/dev/v1/context/acme/{USER}/{SID}"
LIFECYCLE = f"{CONTEXT}/lifecycle"
INVALIDATE = f"{CONTEXT}/cache/invalidate"
MEMORY = f"/dev/v1/memory/acme/{USER}"
HEX64 = re.compile(r"^[0-9a-f]{64}$")


WRITE_PERMISSIONS = ("invalidate_cachescope", "erase_memoryentry")


def operator(name: str = "operator", *, writes: bool = True):
    """A staff user; with ``writes``, allowed the console's invalidate and erase."""
    user = get_user_model().objects.create_user(name, password="pw-not-used", is_staff=True)
    if writes:
        user.user_permissions.add(*Permission.objects.filter(codename__in=WRITE_PERMISSIONS))
    return user


def confirmation(world: World, **changes) -> dict:
    return {
        "app_name": "acme",
        "user_id": USER,
        "session_id": SID,
        "model": MODEL,
        "scope_fingerprint": world.scope_fingerprint,
        **changes,
    }


def endpoints(world: World, app: str = "acme") -> list[tuple[str, str, dict | None]]:
    """(method, url, body) of every diagnostics endpoint, for ``app``."""
    context = f"/dev/v1/context/{app}/{USER}/{SID}"
    memory = f"/dev/v1/memory/{app}/{USER}"
    return [
        ("get", context, None),
        ("get", f"{context}/lifecycle?model={MODEL}", None),
        ("post", f"{context}/cache/invalidate", confirmation(world, app_name=app)),
        ("post", f"{memory}/search", {"query": MARK}),
        ("post", f"{memory}/erase", {"confirm": f"erase user {USER}"}),
        ("get", f"/dev/v1/outbox/{app}/stats", None),
        ("get", f"/dev/v1/outbox/{app}/jobs/{world.job_id}", None),
    ]


def send(client: APIClient, method: str, url: str, data: dict | None):
    if method == "get":
        return client.get(url)
    return client.post(url, data, format="json")


def assert_clean(world: World, *bodies: bytes) -> None:
    for raw in bodies:
        text = raw.decode()
        for forbidden in world.forbidden():
            assert forbidden not in text, (forbidden, text[:400])


def cache_unchanged(world: World, generation: int) -> None:
    row = CacheScope.objects.get(fingerprint=world.scope_fingerprint)
    assert row.generation == generation
    assert list(CacheEntry.objects.filter(scope=row).values_list("state", flat=True)) == ["active"]
    assert registry.resolve(world.owner.app, world.lease).resource_name == world.resource_name
