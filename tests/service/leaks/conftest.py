"""The leak test's harness: the canaries planted per input path, and the taps on every
channel (every logger at DEBUG, a broker queue of this test only, the model providers)."""

from __future__ import annotations

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
from kombu import Exchange, Queue

from caching.adapters import fake_adapter
from config.celery import app as celery_app
from ctxadmin.telemetry import JsonFormatter
from ctxadmin.testing.fake_embeddings import FakeEmbeddings
from ctxadmin.testing.fake_gemini_cache import FakeGeminiCache
from ctxadmin.testing.fake_providers import FakeProvider

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
