"""Secrets seeded through every input path never reach a log record, a Celery message, the
metrics, a diagnostics response, a console page or an error body; credentials and values
under secret-named keys never reach a model provider; and credentials (as opposed to
conversation content, which the owning app stores and reads back) are never stored.

One distinctive value (``sk-LEAKCANARY-<path>-<random>``) is planted per input path: event
parts under secret-named keys and credential-looking event text, session state, memory
metadata and refused memory content, the API keys and tool tokens themselves, the prefix-cache
policy and prefix, provider keys read from the environment, model replies and provider error
bodies, compaction and invocation inputs, artifact metadata, and the headers and query strings
of refused requests. The service's flows then run end to end — sessions and events, context
builds, compaction inline and in the task, invocations over the fake model and over local
servers speaking the Gemini, OpenAI-compatible and Anthropic wire formats, tool tokens,
memory add, search and ingestion through the outbox, the prefix cache, diagnostics and the
console — while every log record of every logger is captured at DEBUG and every task message
is published to a real broker queue of this test only, read back from it and executed here
(as a worker would). Each channel must have captured something, including identifiers that
must appear in it, so the scan cannot pass vacuously.
"""

from __future__ import annotations

import base64
import json
import logging
import secrets
import traceback
import uuid
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field

import pytest
from celery.signals import before_task_publish
from cryptography.fernet import Fernet
from django.contrib import admin
from django.db import connection
from django.test import RequestFactory
from django.urls import reverse
from kombu import Exchange, Queue
from rest_framework.test import APIClient

from caching.adapters import fake_adapter
from config.celery import app as celery_app
from ctxadmin.services import create_api_key
from ctxadmin.telemetry import JsonFormatter
from ctxadmin.testing.fake_embeddings import FakeEmbeddings
from ctxadmin.testing.fake_gemini_cache import FakeGeminiCache
from ctxadmin.testing.fake_providers import FakeProvider
from tests.conftest import Tenant, make_operator, make_tenant
from tests.sessions_helpers import call, response, text

pytestmark = pytest.mark.django_db(transaction=True)

TAG = "LEAKCANARY"
USER = "alice"
BASE = f"/api/v1/apps/acme/users/{USER}"
MODEL = "gemini-2.5-flash"
EMBEDDING_DIMENSION = 384  # the memory column's
FILLER = " ".join(["the itinerary details are long and repetitive"] * 8)
LONG_INSTRUCTIONS = "You are the travel desk's assistant. " + " ".join(
    f"Rule {i}: answer politely and cite the booking policy section {i}." for i in range(200)
)


# ----------------------------------------------------------------------------- canaries


@dataclass(frozen=True)
class Canary:
    name: str
    value: str
    # Conversation content the owning app may store and read back (event text, state): the
    # database is not searched for it. Every other canary is a credential: never stored.
    content: bool
    # Sat under a secret-named key: pruned before any model provider sees a context.
    pruned: bool
    # A model's own reply: a repair request may quote it back to that model, nothing else.
    model_reply: bool = False

    @property
    def provider_may_see(self) -> bool:
        return (self.content and not self.pruned) or self.model_reply

    @property
    def tail(self) -> str:
        """The random end of the value: finds a canary quoted in part."""
        return self.value[-16:]


@dataclass
class Canaries:
    by_name: dict[str, Canary] = field(default_factory=dict)

    def new(self, name: str, **kind) -> str:
        value = f"sk-{TAG}-{name.replace('_', '-')}-{secrets.token_hex(8)}"
        return self.add(name, value, **kind)

    def key_shaped(self, name: str) -> str:
        """43 characters of ``[A-Za-z0-9_-]``: the secret part of an API key or tool token."""
        return self.add(name, (TAG + secrets.token_hex(24))[:43])

    def add(
        self,
        name: str,
        value: str,
        *,
        content: bool = False,
        pruned: bool = False,
        model_reply: bool = False,
    ) -> str:
        assert name not in self.by_name, name
        self.by_name[name] = Canary(name, value, content, pruned, model_reply)
        return value

    def found_in(self, text: str, which=None) -> list[str]:
        return [
            c.name
            for c in self.by_name.values()
            if (which is None or which(c)) and (c.value in text or c.tail in text)
        ]


def key_secret(raw: str) -> str:
    """The secret part of ``ctx_<prefix>_<secret>`` / ``ctt_<prefix>_<secret>``."""
    return raw.split("_", 2)[2]


# ----------------------------------------------------------------------------- capture


class LogTap(logging.Handler):
    """Every record rendered in full: the message, its raw arguments, the exception with its
    whole chain, the stack, and the service's two log formats (the JSON one writes every
    extra of the record)."""

    def __init__(self):
        super().__init__(level=logging.DEBUG)
        self.records: list[str] = []
        self.json = JsonFormatter()
        self.text = logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s")

    def emit(self, record: logging.LogRecord) -> None:
        pieces = [record.name, record.levelname, str(record.msg), repr(record.args)]
        try:
            pieces.append(record.getMessage())
        except Exception as exc:  # a malformed record still shows its raw parts above
            pieces.append(repr(exc))
        if record.exc_info and record.exc_info[1] is not None:
            pieces.append("".join(traceback.format_exception(record.exc_info[1])))
        pieces.extend(filter(None, [record.exc_text, record.stack_info]))
        pieces.append(self.json.format(record))
        pieces.append(self.text.format(record))
        self.records.append("\n".join(pieces))


@contextmanager
def every_logger_at_debug(handler: logging.Handler):
    """Every existing logger at DEBUG, enabled and propagating to ``handler`` on the root;
    loggers made later inherit the root's DEBUG."""
    manager = logging.root.manager
    loggers = [logging.root] + [
        logger for logger in list(manager.loggerDict.values()) if isinstance(logger, logging.Logger)
    ]
    for name in ("ctxadmin", "django", "celery", "kombu", "httpx", "httpcore", "py.warnings"):
        loggers.append(logging.getLogger(name))
    saved = [(logger, logger.level, logger.propagate, logger.disabled) for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.DEBUG)
        logger.propagate = True
        logger.disabled = False
    disabled_below = logging.root.manager.disable
    logging.disable(logging.NOTSET)
    logging.root.addHandler(handler)
    try:
        yield handler
    finally:
        logging.root.removeHandler(handler)
        logging.disable(disabled_below)
        for logger, level, propagate, disabled in saved:
            logger.setLevel(level)
            logger.propagate = propagate
            logger.disabled = disabled


@dataclass
class Message:
    task: str
    text: str  # body, headers and delivery details as published or as delivered


class BrokerTap:
    """Task messages published to a Redis queue of this test only: each seen at Celery's
    publish boundary (``before_task_publish``: the real body and headers) and again as the
    broker delivers it, then executed in this process as a worker would execute it."""

    def __init__(self):
        self.queue = f"ctxadmin-leak-{uuid.uuid4().hex[:12]}"
        self.published: list[Message] = []
        self.delivered: list[Message] = []
        self.executed: list[str] = []

    def on_publish(self, sender=None, body=None, headers=None, **details) -> None:
        everything = {"body": body, "headers": headers, **details}
        self.published.append(Message(str(sender), json.dumps(everything, default=repr)))

    def _bound(self, conn):
        queue = Queue(self.queue, Exchange(self.queue, type="direct"), routing_key=self.queue)
        bound = queue.bind(conn.default_channel)
        bound.declare()
        return bound

    def drain(self, rounds: int = 8) -> None:
        """Deliver and run every queued message, and what running them queues, in turn."""
        for _ in range(rounds):
            with celery_app.connection_for_read() as conn:
                bound = self._bound(conn)
                batch = []
                while (message := bound.get(no_ack=True, accept=["json"])) is not None:
                    batch.append(message)
            if not batch:
                return
            for message in batch:
                body = message.body.decode() if isinstance(message.body, bytes) else message.body
                rest = {"headers": message.headers, "properties": message.properties}
                task = message.headers["task"]
                self.delivered.append(Message(task, body + json.dumps(rest, default=repr)))
                args, kwargs, _embed = message.decode()
                celery_app.tasks[task].apply(
                    args=args, kwargs=kwargs, task_id=message.headers["id"], throw=True
                )
                self.executed.append(task)
        raise AssertionError("tasks kept queueing tasks")

    def delete_queue(self) -> None:
        with celery_app.connection_for_write() as conn:
            self._bound(conn).delete()


@pytest.fixture
def broker():
    tap = BrokerTap()
    # Routed by name at publish time: no worker of the run (one may be alive) consumes it.
    default_queue = celery_app.conf.task_default_queue
    celery_app.conf.task_default_queue = tap.queue
    before_task_publish.connect(tap.on_publish, weak=False)
    try:
        yield tap
    finally:
        before_task_publish.disconnect(tap.on_publish)
        celery_app.conf.task_default_queue = default_queue
        tap.delete_queue()


@dataclass
class Providers:
    """Local servers speaking each provider's wire format, keyed by connection name."""

    servers: dict[str, FakeProvider]
    gemini_cache: FakeGeminiCache
    embeddings: FakeEmbeddings

    def requests_text(self) -> list[tuple[str, str]]:
        seen = []
        for name, server in [
            *self.servers.items(),
            ("gemini-cache", self.gemini_cache),
            ("embeddings", self.embeddings),
        ]:
            for request in server.requests:
                body = request.body.decode("utf-8", "replace")
                seen.append((f"{name} {request.method} {request.path}", f"{request.query} {body}"))
        return seen


@pytest.fixture
def providers(canaries, settings, monkeypatch):
    """Every connection's key from the environment, as deployments give it: a canary each."""
    with ExitStack() as stack:
        servers = {}
        for name, kind in (
            ("gem", "gemini"),
            ("oai", "openai_compatible"),
            ("ant", "anthropic"),
            ("gsum", "gemini"),
            ("broken", "gemini"),
            ("badkey", "openai_compatible"),
        ):
            key = canaries.new(f"provider_key_{name}")
            servers[name] = stack.enter_context(FakeProvider(kind, api_key=key))
            monkeypatch.setenv(f"LEAK_{name.upper()}_KEY", key)
        # The server expects one key; the connection is configured with another.
        monkeypatch.setenv("LEAK_BADKEY_KEY", canaries.new("provider_key_wrong"))
        gemini_key = canaries.new("gemini_api_key")
        cache = stack.enter_context(FakeGeminiCache(api_key=gemini_key))
        monkeypatch.setenv("CTXADMIN_GEMINI_API_KEY", gemini_key)
        monkeypatch.setenv("LEAK_GC_KEY", gemini_key)
        embedder_key = canaries.new("embedder_key")
        embeddings = stack.enter_context(
            FakeEmbeddings("openai_compatible", api_key=embedder_key, dimension=EMBEDDING_DIMENSION)
        )
        monkeypatch.setenv("LEAK_EMB_KEY", embedder_key)
        connections = {
            name: {
                "kind": server.kind,
                "base_url": server.base_url,
                "api_key_env": f"LEAK_{name.upper()}_KEY",
            }
            for name, server in servers.items()
        }
        connections["gc"] = {
            "kind": "gemini",
            "base_url": cache.base_url,
            "api_key_env": "LEAK_GC_KEY",
        }
        connections["emb"] = {
            "kind": "openai_compatible",
            "base_url": embeddings.base_url,
            "api_key_env": "LEAK_EMB_KEY",
        }
        settings.CTXADMIN_PROVIDERS = connections
        settings.CTXADMIN_GEMINI_BASE_URL = cache.base_url
        settings.CTXADMIN_EMBEDDER = "openai_compatible"
        settings.CTXADMIN_EMBEDDER_CONNECTION = "emb"
        settings.CTXADMIN_EMBEDDER_MODEL = "text-embedding-3-small"
        yield Providers(servers, cache, embeddings)


@pytest.fixture
def canaries(settings) -> Canaries:
    """Besides the per-path canaries, the deployment's own secrets are canaries too."""
    found = Canaries()
    settings.SECRET_KEY = found.new("django_secret_key")
    settings.CTXADMIN_METRICS_TOKEN = found.new("metrics_token")
    fernet = Fernet.generate_key().decode()
    settings.CTXADMIN_CACHE_ENCRYPTION_KEYS = [found.add("cache_encryption_key", fernet)]
    settings.CTXADMIN_FAKE_MODEL_DELAY_MS = 0
    settings.CTXADMIN_CACHE_FAKE_DELAY_MS = 0
    settings.CTXADMIN_CACHE_FAKE_FAILURE = ""
    fake_adapter().reset()
    yield found
    fake_adapter().reset()


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


# ----------------------------------------------------------------------------- the test


def test_no_seeded_secret_reaches_logs_messages_metrics_diagnostics_or_console(
    canaries, providers, broker, monkeypatch
):
    import ctxadmin.tasks  # noqa: F401 - each import registers the tasks messages name
    import memory.tasks  # noqa: F401
    import sessions_app.tasks  # noqa: F401
    from caching.tasks import cleanup
    from config.celery import BEAT_SCHEDULE
    from ctxadmin.probes import start_worker_probe

    sent_to_fake_cache: list[str] = []  # the prefixes the in-process cache provider was given
    create = fake_adapter().create

    def recording_create(**arguments):
        sent_to_fake_cache.append(repr(arguments["prefix"]))
        return create(**arguments)

    monkeypatch.setattr(fake_adapter(), "create", recording_create)
    tap = LogTap()
    controls = Canaries()
    with every_logger_at_debug(tap):
        run = Run(make_tenant("acme"), canaries)
        seed_keys(run)
        seed_sessions(run)
        seed_model_summarizer(run, providers)
        seed_memory(run)
        seed_invocations_and_tool_tokens(run)
        seed_wire_invocations(run, providers)
        cache = seed_cache(run)
        resource_names = [*fake_adapter().resources]  # deleted by the cleanup below
        start_worker_probe()
        # What beat publishes, as it publishes it.
        for entry in BEAT_SCHEDULE.values():
            celery_app.tasks[entry["task"]].apply_async()
        broker.drain()
        staff = APIClient()
        operator = make_operator()
        staff.force_login(operator)
        responses = diagnostics(run, cache, staff)
        cleanup.apply_async()  # the invalidated entry's provider resource is deleted
        broker.drain()
        metrics = APIClient().get(
            "/metrics", HTTP_AUTHORIZATION=f"Bearer {canaries.by_name['metrics_token'].value}"
        )
        assert metrics.status_code == 200
        pages = console_pages(operator)
        # Positive controls: a DEBUG record with a canary in its arguments, and one with a
        # canary only in its exception, must be found by the same scan.
        control_logger = logging.getLogger("ctxadmin.leakcheck")
        control_logger.debug("control record %s", controls.new("control_args"))
        try:
            raise RuntimeError(controls.new("control_exception"))
        except RuntimeError:
            control_logger.debug("control failure", exc_info=True)

    # --- what the flows did (so that finding nothing means something)
    from sessions_app.models import Checkpoint

    rows = Checkpoint.objects.filter(compaction_id__in=run.checkpoint_ids)
    states = dict(rows.values_list("compaction_id", "status"))
    # A task goes by the checkpoint's own key, the API by its compaction id.
    keys = {str(public): str(key) for public, key in rows.values_list("compaction_id", "pk")}
    assert sorted(states.values()) == ["active", "failed"], states
    assert providers.servers["gsum"].requests, "the summarizer was never called"
    for name in ("gem", "oai", "ant"):
        assert providers.servers[name].problems == [], name
    assert providers.gemini_cache.creates == 1 and providers.gemini_cache.problems == []
    assert providers.embeddings.requests and providers.embeddings.problems == []
    assert fake_adapter().creates == 1 and fake_adapter().deletes == 1
    assert len(sent_to_fake_cache) == 1 and len(providers.gemini_cache.resources) == 1
    resource_names += [*providers.gemini_cache.resources]

    # --- the channels
    logs = [(f"log record {n}", record) for n, record in enumerate(tap.records)]
    published = [(f"published {m.task}", m.text) for m in broker.published]
    delivered = [(f"delivered {m.task}", m.text) for m in broker.delivered]
    channels = {
        "logs": logs,
        "celery messages": published + delivered,
        "metrics": [("/metrics", metrics.content.decode())],
        "diagnostics": [(label, body.decode()) for label, body in responses],
        "console": [(url, body.decode()) for url, body in pages],
        "refusals": [(label, body.decode()) for label, body in run.refusals],
    }

    # Each channel captured something substantial, including what must appear in it.
    assert len(logs) >= 200, len(logs)
    assert len(broker.published) == len(broker.delivered) >= 12, broker.executed
    assert {"sessions_app.run_compaction", "memory.drain_outbox", "caching.cleanup"} <= {
        m.task for m in broker.published
    }
    assert len(responses) >= 30 and len(pages) >= 100, (len(responses), len(pages))
    api_key_prefix = run.owner.key.split("_")[1]
    must_appear = {
        "logs": [*run.job_ids, "invocation", "provider_call", "Unauthorized"],
        "celery messages": [*run.job_ids, keys[run.checkpoint_ids[1]]],
        "metrics": ["ctxadmin_http_requests_total", "invocations"],
        "diagnostics": [*run.job_ids, run.checkpoint_ids[0], cache["scope_fingerprint"]],
        "console": [api_key_prefix, "acme", "lookup_booking"],
        "refusals": ["sensitive_memory_content", "sensitive_cache_scope", "authentication"],
    }
    for channel, needles in must_appear.items():
        everything = "\n".join(captured for _label, captured in channels[channel])
        for needle in needles:
            assert needle in everything, f"{needle!r} missing from {channel}"
    control_hits = {name for _label, record in logs for name in controls.found_in(record)}
    assert control_hits == {"control_args", "control_exception"}, control_hits

    # --- the scan
    leaks = []
    for channel, items in channels.items():
        for label, captured in items:
            for name in canaries.found_in(captured):
                leaks.append(f"{name} in {channel}: {label}")
            for resource in resource_names:
                if resource in captured or resource.split("/")[-1] in captured:
                    leaks.append(f"provider resource name in {channel}: {label}")
    for label, sent in providers.requests_text():
        for name in canaries.found_in(sent, which=lambda c: not c.provider_may_see):
            leaks.append(f"{name} reached a provider: {label}")
    for prefix in sent_to_fake_cache:
        for name in canaries.found_in(prefix, which=lambda c: not c.provider_may_see):
            leaks.append(f"{name} reached the in-process cache provider")
    for table, row in database_text():
        for name in canaries.found_in(row, which=lambda c: not c.content):
            leaks.append(f"{name} stored in {table}")
    assert leaks == [], "\n".join(sorted(set(leaks)))
    assert len(canaries.by_name) >= 60, len(canaries.by_name)


def test_a_logged_request_is_written_as_its_method_and_path_without_the_query_string():
    """Django attaches the request to its own records; a query string may carry a key."""
    request = RequestFactory().get("/readyz", {"api_key": f"sk-{TAG}-query"})
    record = logging.LogRecord("django.request", logging.ERROR, __file__, 1, "%s", ("x",), None)
    record.request = request
    record.status_code = 503
    line = json.loads(JsonFormatter().format(record))
    assert (line["request"], line["status_code"]) == ("GET /readyz", 503)


# ----------------------------------------------------------------------------- the tables


def test_every_credential_name_and_format_is_pruned_refused_skipped_or_redacted(monkeypatch):
    """The key-name and credential-format tables of ``tests/secret_tables.py`` through the
    real input paths: every credential-named key is pruned from the context envelope (in
    function-call arguments, function responses, state deltas and the generation config)
    while every ordinary key arrives; memory add refuses every credential text and keeps
    every ordinary one; ``memories/events`` skips the first and adds the second; outbox
    ingestion redacts each credential out of a sentence and keeps the sentence; an inline
    compaction over user, model and tool turns holding them stores none in its summary."""
    from memory.models import MemoryEntry
    from memory.outbox import worker
    from memory.tasks import drain_outbox
    from sessions_app.models import Checkpoint
    from tests.secret_tables import ORDINARY_KEYS, ORDINARY_TEXTS, SECRET_KEYS, credential_texts

    monkeypatch.setattr(drain_outbox, "delay_on_commit", lambda *args, **kwargs: None)
    api = make_tenant("acme").client()
    credentials = credential_texts()
    secret_values = {
        name: f"{TAG}-{n}-{secrets.token_hex(6)}" for n, name in enumerate(SECRET_KEYS)
    }
    ordinary_values = {
        name: f"kept-{n}-{secrets.token_hex(4)}" for n, name in enumerate(ORDINARY_KEYS)
    }
    mixed = {**secret_values, **ordinary_values}

    def leaked(text: str) -> list[str]:
        found = [name for name, value in secret_values.items() if value in text]
        return found + [label for label, _text, secret in credentials if secret in text]

    # --- the context envelope: call arguments, responses, state deltas, generation config
    api.post(f"{BASE}/sessions", {"session_id": "tables"}, format="json")
    delta_keys = [k for k in mixed if not k.startswith("temp:")]
    events = [
        call("t1", args=mixed, event_id="tables-call"),
        response("t1", mixed, event_id="tables-response"),
    ]
    for start in range(0, len(delta_keys), 200):
        delta = {key: mixed[key] for key in delta_keys[start : start + 200]}
        events.append(
            text("agent", "noted", event_id=f"tables-delta-{start}", actions={"state_delta": delta})
        )
    answer = api.post(f"{BASE}/sessions/tables/events", {"events": events}, format="json")
    assert answer.status_code == 201, answer.content[:400]
    build = {
        "current_input": {"role": "user", "parts": [{"text": "go on"}]},
        "generation_config": mixed,
    }
    answer = api.post(f"{BASE}/sessions/tables/context", build, format="json")
    assert answer.status_code == 200, answer.content[:400]
    envelope = answer.content.decode()
    assert leaked(envelope) == []
    missing = [name for name, value in ordinary_values.items() if value not in envelope]
    assert missing == []
    envelope_json = answer.json()["envelope"] if "envelope" in answer.json() else answer.json()
    assert json.dumps(envelope_json).count(next(iter(ordinary_values.values()))) >= 4

    # --- memory add: refused with a credential, kept without
    for label, words, _secret in credentials:
        body = {"content": f"Note for later: {words} (thanks)"}
        refused = api.post(f"{BASE}/memories", body, format="json")
        assert refused.status_code == 422, (label, refused.content[:200])
        assert refused.json()["error"]["code"] == "sensitive_memory_content"
    for words in ORDINARY_TEXTS:
        kept = api.post(f"{BASE}/memories", {"content": words}, format="json")
        assert kept.status_code in (200, 201), (words, kept.content[:200])

    # --- memories/events: skipped with a credential, added without
    events = [
        text("user", words, event_id=f"me-c{n}") for n, (_l, words, _s) in enumerate(credentials)
    ]
    events += [text("user", words, event_id=f"me-o{n}") for n, words in enumerate(ORDINARY_TEXTS)]
    result = api.post(
        f"{BASE}/memories/events", {"session_id": "tables", "events": events}, format="json"
    )
    assert result.status_code == 200, result.content[:400]
    assert result.json()["skipped_by_reason"] == {"secret": len(credentials)}, result.json()

    # --- outbox ingestion: each credential redacted out of its sentence, the sentence kept
    api.post(f"{BASE}/sessions", {"session_id": "ingest"}, format="json")
    events = [
        text("user", f"Remember {n}: {words}\nand that I fly on Tuesdays.", event_id=f"in-c{n}")
        for n, (_l, words, _s) in enumerate(credentials)
    ]
    events += [text("agent", words, event_id=f"in-o{n}") for n, words in enumerate(ORDINARY_TEXTS)]
    answer = api.post(f"{BASE}/sessions/ingest/events", {"events": events}, format="json")
    assert answer.status_code == 201, answer.content[:400]
    job = api.post(f"{BASE}/memories/ingestions", {"session_id": "ingest"}, format="json")
    assert job.status_code == 202, job.content
    assert worker.drain() == {"completed": 1}
    ingested = dict(
        MemoryEntry.objects.filter(session_id="ingest").values_list("event_id", "content")
    )
    stored = "\n".join(MemoryEntry.objects.values_list("content", flat=True))
    assert leaked(stored) == []
    for n, words in enumerate(ORDINARY_TEXTS):
        assert ingested.get(f"in-o{n}") == words.strip(), n
    redacted = [ingested.get(f"in-c{n}", "") for n in range(len(credentials))]
    kept = [t for t in redacted if t.startswith("Remember") and "[redacted]" in t]
    assert len(kept) >= len(credentials) - 5, redacted  # a few are all credential: skipped

    # --- compaction: user, model and tool turns holding credentials; none in the summary
    api.post(f"{BASE}/sessions", {"session_id": "compact"}, format="json")
    events = []
    for n, (_label, words, _secret) in enumerate(credentials):
        events.append(text("user", f"Request {n}: {words}", event_id=f"cu{n}"))
        events.append(call(f"cc{n}", args={"q": n}, event_id=f"cc{n}"))
        events.append(response(f"cc{n}", {"note": words, "status": "ok"}, event_id=f"cr{n}"))
        events.append(text("agent", f"Done {n}: {words}", event_id=f"cm{n}", turn_complete=True))
    answer = api.post(f"{BASE}/sessions/compact/events", {"events": events}, format="json")
    assert answer.status_code == 201, answer.content[:400]
    policy = {"token_threshold": 10, "retain_recent_exchanges": 1}
    api.put(f"{BASE}/sessions/compact/compaction-policy", policy, format="json")
    done = api.post(f"{BASE}/sessions/compact/compactions", {}, format="json")
    assert done.status_code == 201 and done.json()["status"] == "active", done.content[:400]
    checkpoint = Checkpoint.objects.get(compaction_id=done.json()["compaction_id"])
    summary = json.dumps(checkpoint.summary, ensure_ascii=False)
    assert checkpoint.summary["user_requests"], summary[:400]
    assert leaked(summary + checkpoint.items_json) == []
