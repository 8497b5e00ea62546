"""The service's flows the leak test runs end to end with the canaries planted, and the
read-outs it scans afterwards (diagnostics, console pages, the database's text)."""

from __future__ import annotations

import base64
import json
import secrets
from dataclasses import dataclass, field

from django.contrib import admin
from django.db import connection
from django.test import RequestFactory
from django.urls import reverse
from rest_framework.test import APIClient

from ctxadmin.services import create_api_key
from tests.conftest import Tenant, make_tenant
from tests.service.leaks.conftest import (
    BASE,
    FILLER,
    LONG_INSTRUCTIONS,
    MODEL,
    USER,
    Canaries,
    Providers,
    key_secret,
)
from tests.sessions_helpers import call, response, text

# ----------------------------------------------------------------------------- the flows


@dataclass
class Run:
    """What the flows produced that the scan needs."""

    owner: Tenant
    canaries: Canaries
    job_ids: list[str] = field(default_factory=list)
    checkpoint_ids: list[str] = field(default_factory=list)
    refusals: list[tuple[str, bytes]] = field(default_factory=list)  # error bodies

    def api(self, key: str | None = None) -> APIClient:
        return self.owner.client(key)

    def ok(self, answer, *statuses: int) -> dict:
        assert answer.status_code in (statuses or (200, 201)), answer.content[:600]
        return answer.json() if answer.content else {}

    def refused(self, label: str, answer, status: int) -> dict:
        assert answer.status_code == status, (label, answer.status_code, answer.content[:600])
        self.refusals.append((label, answer.content))
        return answer.json() if answer["Content-Type"] == "application/json" else {}


def create_session(run: Run, sid: str, state: dict | None = None) -> None:
    body = {"session_id": sid, **({"state": state} if state else {})}
    run.ok(run.api().post(f"{BASE}/sessions", body, format="json"), 201)


def append(run: Run, sid: str, events: list[dict]) -> None:
    answer = run.api().post(f"{BASE}/sessions/{sid}/events", {"events": events}, format="json")
    run.ok(answer, 201)


def conversation(turns: int, tag: str) -> list[dict]:
    events = []
    for n in range(turns):
        events.append(text("user", f"{tag} question {n}: {FILLER}", event_id=f"{tag}-u{n}"))
        events.append(text("agent", f"{tag} answer {n}: {FILLER}", event_id=f"{tag}-m{n}"))
    return events


def seed_sessions(run: Run) -> None:
    """A session whose state, events, event metadata and state deltas carry secrets; a
    context build; an inline compaction over it; the same session read back."""
    c = run.canaries
    create_session(
        run,
        "s1",
        {
            "api_key": c.new("state_api_key", content=True),
            "user:password": c.new("state_user_password", content=True),
            "app:client_secret": c.new("state_app_client_secret", content=True),
            "temp:access_token": c.new("state_temp_access_token"),  # never stored
            "plan": "gold",
        },
    )
    secret_text = c.new("event_text_api_key", content=True)
    bearer = c.new("event_text_bearer", content=True)
    events = [
        text("user", f"please keep my api_key={secret_text} handy", event_id="s1-secret-text"),
        text("user", f"the header was Authorization: Bearer {bearer}", event_id="s1-bearer"),
        call(
            "c1",
            args={"api_key": c.new("event_call_api_key", content=True, pruned=True), "city": "x"},
            event_id="s1-call",
        ),
        response(
            "c1",
            {
                "password": c.new("event_response_password", content=True, pruned=True),
                "authorization": "Bearer "
                + c.new("event_response_authorization", content=True, pruned=True),
                "result": "ok",
                "nested": {
                    "access_token": c.new("event_nested_token", content=True, pruned=True),
                    "Set-Cookie": c.new("event_nested_cookie", content=True, pruned=True),
                },
            },
            event_id="s1-response",
        ),
        text(
            "agent",
            "Here you go.",
            event_id="s1-meta",
            custom_metadata={
                "client_secret": c.new("event_metadata_secret", content=True, pruned=True),
                "tag": "reply",
            },
            actions={
                "state_delta": {
                    "session_token": c.new("event_state_delta_token", content=True, pruned=True),
                    "user:private_key": c.new("event_state_delta_key", content=True, pruned=True),
                    "progress": "step 1",
                }
            },
        ),
        *conversation(4, "s1"),
    ]
    append(run, "s1", events)
    run.ok(run.api().get(f"{BASE}/sessions/s1/events"))
    run.ok(run.api().get(f"{BASE}/sessions/s1"))
    run.ok(run.api().get(f"{BASE}/sessions/s1/state"))
    run.ok(run.api().get(f"{BASE}/state"))
    build = {
        "current_input": {
            "role": "user",
            "parts": [{"text": f"use password={c.new('context_input', content=True)}"}],
        },
        "instructions": f"Be brief. api_key={c.new('context_instructions', content=True)}",
        "tools": [{"name": "lookup", "description": "Find a booking."}],
        "memory": {"query": "aisle seats", "mode": "lexical"},
    }
    run.ok(run.api().post(f"{BASE}/sessions/s1/context", build, format="json"))
    policy = {"token_threshold": 10, "retain_recent_exchanges": 1}
    run.ok(run.api().put(f"{BASE}/sessions/s1/compaction-policy", policy, format="json"))
    done = run.ok(run.api().post(f"{BASE}/sessions/s1/compactions", {}, format="json"), 201)
    assert done["status"] == "active", done
    run.checkpoint_ids.append(done["compaction_id"])
    # A compaction-policy field that names a credential is refused naming the field only.
    bad_policy = {"token_threshold": 10, "api_key": c.new("compaction_policy_field")}
    answer = run.api().put(f"{BASE}/sessions/s1/compaction-policy", bad_policy, format="json")
    run.refused("compaction policy with a credential", answer, 400)


def seed_model_summarizer(run: Run, providers: Providers) -> None:
    """An asynchronous compaction whose summarizer is a Gemini connection (key: a canary)
    that replies with text which is not a summary, twice (the repair attempt included)."""
    c = run.canaries
    create_session(run, "s2")
    events = conversation(4, "s2")
    events[1] = text("agent", f"my password={c.new('summarizer_input', content=True)}")
    append(run, "s2", events)
    gsum = providers.servers["gsum"]
    gsum.script(
        gsum.success(f"Sure! {c.new('summarizer_reply_text', model_reply=True)}"),
        gsum.success(json.dumps({"summary": c.new("summarizer_reply_json", model_reply=True)})),
    )
    policy = {
        "token_threshold": 10,
        "retain_recent_exchanges": 1,
        "summarizer": {"kind": "gemini", "connection": "gsum", "model": MODEL},
    }
    run.ok(run.api().put(f"{BASE}/sessions/s2/compaction-policy", policy, format="json"))
    queued = run.api().post(f"{BASE}/sessions/s2/compactions", {"async": True}, format="json")
    run.checkpoint_ids.append(run.ok(queued, 202)["compaction_id"])


def invoke(run: Run, sid: str, invocation_id: str, input_: dict, agent: dict, **extra):
    body = {"invocation_id": invocation_id, "input": input_, "agent": agent, "cache": "off"}
    body.update(extra)
    return run.api().post(f"{BASE}/sessions/{sid}/invocations", body, format="json")


def user_text(words: str) -> dict:
    return {"role": "user", "parts": [{"text": words}]}


def seed_invocations_and_tool_tokens(run: Run) -> None:
    """Fake-model invocations whose input, instructions and function-call arguments carry
    secrets; a tool token used, refused when forged, and refused once its call is answered;
    the automatic compaction check they queue."""
    c = run.canaries
    create_session(run, "s3")
    automatic = {"token_threshold": None, "event_threshold": 4, "retain_recent_exchanges": 1}
    run.ok(run.api().put(f"{BASE}/sessions/s3/compaction-policy", automatic, format="json"))
    agent = {
        "provider": "fake",
        "model": "fake-1",
        "instructions": f"Be brief. password={c.new('invocation_instructions', content=True)}",
        "declarations": [{"name": "lookup_booking"}],
    }
    args = {"ref": "A1", "api_key": c.new("invocation_call_args", content=True, pruned=True)}
    first = invoke(run, "s3", "inv-1", user_text(f"call:lookup_booking {json.dumps(args)}"), agent)
    called = run.ok(first, 201)["function_calls"][0]
    mint = {
        "tool_name": "lookup_booking",
        "capabilities": ["memory_search", "memory_add", "state_read", "artifact_put"],
    }
    minted = run.ok(
        run.api().post(f"{BASE}/sessions/s3/invocations/inv-1/tool-tokens", mint, format="json"),
        201,
    )
    token = minted["token"]
    c.add("tool_token", key_secret(token))
    tool = run.api(token)
    run.ok(tool.get("/api/v1/apps/acme/tool-token"))
    run.ok(tool.get(f"{BASE}/sessions/s3/state"))
    search = {"query": "aisle seats", "mode": "lexical"}
    run.ok(tool.post(f"{BASE}/memories/search", search, format="json"))
    added = {
        "content": "Alice keeps her boarding passes in the app",
        "metadata": {"api_key": c.new("tool_memory_metadata"), "source": "tool"},
    }
    run.ok(tool.post(f"{BASE}/memories", added, format="json"), 201)
    artifact = {
        "data_base64": base64.b64encode(b"itinerary").decode(),
        "mime_type": "text/plain",
        "custom_metadata": {"password": c.new("tool_artifact_metadata"), "label": "itinerary"},
    }
    run.ok(tool.post(f"{BASE}/sessions/s3/artifacts/itinerary.txt", artifact, format="json"), 201)
    forged = f"ctt_{minted['prefix']}_{c.key_shaped('forged_tool_token')}"
    run.refused("forged tool token", run.api(forged).get("/api/v1/apps/acme/tool-token"), 401)
    answer = {
        "role": "user",
        "parts": [
            {
                "function_response": {
                    "id": called["id"],
                    "name": "lookup_booking",
                    "response": {
                        "password": c.new(
                            "invocation_response_password", content=True, pruned=True
                        ),
                        "status": "confirmed",
                    },
                }
            }
        ],
    }
    run.ok(invoke(run, "s3", "inv-2", answer, agent), 201)
    run.refused("answered tool token", tool.get("/api/v1/apps/acme/tool-token"), 401)
    run.ok(invoke(run, "s3", "inv-3", user_text("thanks, that is all"), agent), 201)


def seed_wire_invocations(run: Run, providers: Providers) -> None:
    """Invocations over each wire format, with secret-keyed history the providers must not
    receive; durable ingestion; a Gemini prefix cache created then hit; a provider that fails
    with a body carrying a canary; a connection whose key the provider refuses."""
    c = run.canaries
    for sid, connection_name in (("s4", "gem"), ("s5", "oai"), ("s6", "ant")):
        create_session(run, sid)
        secret = c.new(f"wire_history_{connection_name}", content=True, pruned=True)
        append(
            run,
            sid,
            [
                text("user", "find my booking", event_id=f"{sid}-ask"),
                call("c9", name="lookup_booking", args={"api_key": secret}, event_id=f"{sid}-c"),
                response("c9", {"client_secret": secret, "ok": True}, name="lookup_booking"),
                text("agent", "Found it.", event_id=f"{sid}-done"),
            ],
        )
        agent = {
            "provider": connection_name,
            "model": "gemini-2.5-flash" if connection_name == "gem" else "model-x",
            "instructions": "Be brief.",
            "declarations": [{"name": "lookup_booking", "parameters": {"type": "object"}}],
        }
        extra = {"memory_retrieval": {"mode": "lexical"}, "ingestion": "durable"}
        answer = run.ok(invoke(run, sid, f"{sid}-inv", user_text("which seat?"), agent, **extra))
        if answer["ingestion"].get("job_id"):
            run.job_ids.append(answer["ingestion"]["job_id"])
    create_session(run, "s7")
    agent = {
        "provider": "gc",
        "model": MODEL,
        "instructions": f"{LONG_INSTRUCTIONS} {c.new('cached_instructions', content=True)}",
    }
    cache = {"ttl_ms": 600_000, "min_prefix_tokens": 100}
    created = run.ok(invoke(run, "s7", "s7-a", user_text("Hi"), agent, cache=cache))
    hit = run.ok(invoke(run, "s7", "s7-b", user_text("Again"), agent, cache=cache))
    assert (created["cache"]["status"], hit["cache"]["status"]) == ("created", "hit")
    create_session(run, "s8")
    server = providers.servers["broken"]
    server.script(*[server.error(500, f"internal: {c.new('provider_error_body')}")] * 3)
    broken = {"provider": "broken", "model": MODEL}
    run.refused("provider error", invoke(run, "s8", "s8-a", user_text("hello"), broken), 503)
    refused = {"provider": "badkey", "model": "model-x"}
    run.refused(
        "provider refuses the key", invoke(run, "s8", "s8-b", user_text("hi"), refused), 502
    )


def seed_memory(run: Run) -> None:
    """Memory with secret metadata (redacted), content that carries a credential (refused),
    events with credentials (skipped), searches, and an ingestion job of session s1."""
    c = run.canaries
    added = {
        "content": "Alice prefers aisle seats",
        "metadata": {
            "api_key": c.new("memory_metadata_api_key"),
            "nested": {"password": c.new("memory_metadata_nested_password")},
            "topic": "travel",
        },
        "embed": "sync",
    }
    entry = run.ok(run.api().post(f"{BASE}/memories", added, format="json"), 201)
    assert entry["metadata"]["api_key"] == "[redacted]", entry
    for name, words in (
        ("memory_content_password", "my password={}"),
        ("memory_content_sk", "the production key is {}"),
    ):
        body = {"content": words.format(c.new(name))}
        refused = run.refused(name, run.api().post(f"{BASE}/memories", body, format="json"), 422)
        assert refused["error"]["code"] == "sensitive_memory_content"
    events = {
        "session_id": "s1",
        "events": [
            text("user", f"token={c.new('memory_events_text')}", event_id="me-1"),
            text(
                "user",
                "I fly on Tuesdays",
                event_id="me-2",
                custom_metadata={"api_key": c.new("memory_events_metadata")},
            ),
        ],
    }
    result = run.ok(run.api().post(f"{BASE}/memories/events", events, format="json"))
    assert result["skipped_by_reason"].get("secret") == 1, result
    for mode in ("lexical", "vector", "hybrid"):
        query = {"query": f"aisle {c.new(f'memory_query_{mode}', content=True)}", "mode": mode}
        run.ok(run.api().post(f"{BASE}/memories/search", query, format="json"))
    job = run.api().post(f"{BASE}/memories/ingestions", {"session_id": "s1"}, format="json")
    run.job_ids.append(run.ok(job, 202)["job_id"])
    # Another user's memory, erased through diagnostics below.
    carol = {"content": "Carol likes tea", "embed": "sync"}
    run.ok(run.api().post("/api/v1/apps/acme/users/carol/memories", carol, format="json"), 201)


def seed_cache(run: Run) -> dict:
    """Cache scopes with a credential in the policy (refused before anything else) and a
    prefix whose contents carry one under a secret-named key (pruned); acquire, hit, status,
    invalidate."""
    from tests.cache_helpers import prefix, scope

    c = run.canaries
    url = "/api/v1/apps/acme/cache"
    refusals = (
        ("cache policy api_key", {"scope": scope(api_key=c.new("cache_policy_api_key"))}),
        (
            "cache policy label",
            {"scope": scope(labels={"team": "a", "client_secret": c.new("cache_policy_label")})},
        ),
    )
    for label, partial in refusals:
        body = {**partial, "prefix": prefix()}
        answer = run.refused(label, run.api().post(f"{url}/acquire", body, format="json"), 400)
        assert answer["error"]["code"] == "sensitive_cache_scope", answer
    bad = {"scope": scope(password=c.new("cache_invalidate_password"))}
    run.refused("cache invalidate", run.api().post(f"{url}/invalidate", bad, format="json"), 400)
    cached = prefix(marker=f"zz{secrets.token_hex(4)}")
    cached["contents"].append(
        {
            "role": "model",
            "parts": [
                {
                    "functionCall": {
                        "name": "lookup",
                        "args": {"api_key": c.new("cache_prefix_call_args", pruned=True)},
                    }
                }
            ],
        }
    )
    body = {"scope": scope(USER, model=MODEL), "prefix": cached, "timeout_ms": 10_000}
    created = run.ok(run.api().post(f"{url}/acquire", body, format="json"))
    assert created["status"] == "created", created
    run.ok(run.api().post(f"{url}/acquire", body, format="json"))
    run.ok(run.api().get(f"{url}/scopes/{created['scope_fingerprint']}"))
    return created


def seed_keys(run: Run) -> None:
    """A second key used then revoked then used again; another app's key; malformed and
    forged credentials; credentials in query strings, cookies and other headers."""
    c = run.canaries
    c.add("owner_api_key", key_secret(run.owner.key))
    _row, rotating = create_api_key(run.owner.app, ["sessions"], name="rotating")
    c.add("rotating_api_key", key_secret(rotating))
    run.ok(run.api(rotating).get(f"{BASE}/sessions"))
    prefix = rotating.split("_")[1]
    run.ok(run.api().delete(f"/api/v1/apps/acme/keys/{prefix}"), 204)
    run.refused("revoked key", run.api(rotating).get(f"{BASE}/sessions"), 401)
    globex = make_tenant("globex")
    c.add("other_app_api_key", key_secret(globex.key))
    run.refused("another app's key", run.api(globex.key).get(f"{BASE}/sessions"), 404)
    forged = f"ctx_{run.owner.app.api_keys.first().prefix}_{c.key_shaped('forged_api_key')}"
    run.refused("forged key", run.api(forged).get(f"{BASE}/sessions"), 401)
    run.refused("malformed key", run.api(c.new("malformed_api_key")).get(f"{BASE}/sessions"), 401)
    anonymous = APIClient()
    anonymous.cookies["sessionid"] = c.new("cookie_session_id")
    anonymous.cookies["csrftoken"] = c.new("cookie_csrf")
    other_scheme = anonymous.get(
        f"{BASE}/sessions",
        HTTP_AUTHORIZATION=f"Token {c.new('token_scheme_key')}",
        HTTP_X_API_KEY=c.new("x_api_key_header"),
    )
    run.refused("another scheme", other_scheme, 401)
    run.refused(
        "query credential",
        run.api().get(f"{BASE}/sessions?api_key={c.new('query_api_key')}"),
        400,
    )
    run.refused(
        "query token on diagnostics",
        run.api().get(f"/dev/v1/context/acme/{USER}/s1?access_token={c.new('query_token')}"),
        400,
    )
    run.refused(
        "query value",
        run.api().get(f"/dev/v1/context/acme/{USER}/s1?max_bytes={c.new('query_max_bytes')}"),
        400,
    )
    # Django logs a refused Host header with the request attached (django.security).
    foreign_host = APIClient().get(
        f"/healthz?api_key={c.new('query_foreign_host')}", HTTP_HOST="attacker.invalid"
    )
    run.refused("foreign Host header", foreign_host, 400)
    malformed = f'{{"events": [{{"author": "user", "content": "{c.new("malformed_body")}'
    answer = run.api().generic(
        "POST", f"{BASE}/sessions/s1/events", malformed, content_type="application/json"
    )
    run.refused("malformed JSON body", answer, 400)
    wrong = APIClient().get("/metrics", HTTP_AUTHORIZATION=f"Bearer {c.new('wrong_metrics_token')}")
    run.refused("wrong metrics token", wrong, 401)


# ----------------------------------------------------------------------------- read-outs


def diagnostics(run: Run, cache: dict, staff: APIClient) -> list[tuple[str, bytes]]:
    """Every diagnostics endpoint, read by the owner's key and by a staff session."""
    c = run.canaries
    bodies = []
    context = f"/dev/v1/context/acme/{USER}"
    memory = f"/dev/v1/memory/acme/{USER}"
    for who, client in (("key", run.api()), ("staff", staff)):
        reads = [f"{context}/{sid}" for sid in ("s1", "s2", "s3", "s4", "s7")] + [
            f"{context}/s1?max_bytes=300",
            f"{context}/s1/lifecycle",
            f"{context}/s7/lifecycle?model={MODEL}",
            f"{context}/s1/lifecycle?model={MODEL}",
            "/dev/v1/outbox/acme/stats",
            *(f"/dev/v1/outbox/acme/jobs/{job}" for job in run.job_ids),
        ]
        for url in reads:
            answer = client.get(url)
            assert answer.status_code == 200, (url, answer.content[:400])
            bodies.append((f"{who} GET {url}", answer.content))
        query = {"query": f"aisle {c.new(f'diagnostics_query_{who}', content=True)}"}
        answer = client.post(f"{memory}/search", query, format="json")
        assert answer.status_code == 200, answer.content
        bodies.append((f"{who} memory search", answer.content))
    confirmation = {
        "app_name": "acme",
        "user_id": USER,
        "session_id": "s1",
        "model": MODEL,
        "scope_fingerprint": cache["scope_fingerprint"],
    }
    answer = run.api().post(f"{context}/s1/cache/invalidate", confirmation, format="json")
    assert answer.status_code == 200, answer.content
    bodies.append(("key cache invalidate", answer.content))
    erase = staff.post(
        "/dev/v1/memory/acme/carol/erase", {"confirm": "erase user carol"}, format="json"
    )
    assert erase.status_code == 200, erase.content
    bodies.append(("staff memory erase", erase.content))
    return bodies


def console_pages(operator) -> list[tuple[str, bytes]]:
    """The index, the dashboard, and for every registered model its list page, the change
    page of each row (up to 100), and the history and delete confirmation pages of its first
    row (which list related objects by name)."""
    from django.test import Client

    client = Client()
    client.force_login(operator)
    request = RequestFactory().get("/admin/")
    request.user = operator
    pages = []

    def get(url: str) -> None:
        answer = client.get(url)
        assert answer.status_code == 200, (url, answer.status_code)
        pages.append((url, answer.content))

    for url in ("/admin/", "/admin/dashboard/", "/admin/dashboard/data.json"):
        get(url)
    for model, model_admin in admin.site._registry.items():
        name = f"admin:{model._meta.app_label}_{model._meta.model_name}"
        get(reverse(f"{name}_changelist"))
        rows = list(model_admin.get_queryset(request).order_by("pk").values_list("pk", flat=True))
        for pk in rows[:100]:
            get(reverse(f"{name}_change", args=[pk]))
        if rows:
            get(reverse(f"{name}_history", args=[rows[0]]))
            if model_admin.has_delete_permission(request):
                get(reverse(f"{name}_delete", args=[rows[0]]))
    return pages


def database_text() -> list[tuple[str, str]]:
    """Every row of every table, as JSON text."""
    rows = []
    with connection.cursor() as cursor:
        for table in connection.introspection.table_names():
            quoted = connection.ops.quote_name(table)
            cursor.execute(f"SELECT row_to_json(t)::text FROM {quoted} t")  # noqa: S608 - a table name from introspection
            rows.extend((table, row[0]) for row in cursor.fetchall())
    return rows
