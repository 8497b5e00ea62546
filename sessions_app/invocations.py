"""Invocations: one model call with managed context (``POST …/sessions/{sid}/invocations``).

Each step is bounded by the invocation's absolute deadline:

1. the context is built with the policy (budgets, pruning, the active checkpoint, memory
   preloaded for the user's text as untrusted reference data), the input as its current
   input; when its estimate passes the session's compaction ``token_threshold``, the history
   is compacted first and built again. A budget error answers before anything is stored;
2. the input event is appended (the client's invocation id makes the whole call idempotent:
   a repeated request answers the stored result, a different one under the same id is 409);
3. for a Gemini connection (or the ``fake`` provider), the stable prefix — instructions,
   tools and the history up to the newest checkpoint — is acquired from the prefix-cache
   registry, and only the rest is sent with ``cachedContent``; a bypass sends it all;
4. the provider is called; the model's event is appended with its usage and content-free
   cache metadata, which queues automatic compaction and ``on_success`` ingestion;
5. ``ingestion: "durable"`` admits the new events to the outbox before answering.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import IntegrityError
from django.utils import timezone

from caching import keys as cache_keys
from caching import registry as cache_registry
from ctxadmin.api.paths import path_segment_error
from ctxadmin.canonical import fingerprint
from ctxadmin.errors import ServiceError, invalid, strict_object
from ctxadmin.models import App
from ctxadmin.providers.base import ProviderError, UnknownConnection, get_connection
from sessions_app import fake_model, services
from sessions_app.compaction import services as compaction
from sessions_app.context import build as context_build
from sessions_app.events import EventError, validate_content
from sessions_app.models import Checkpoint, Invocation, Session

logger = logging.getLogger("ctxadmin.invocations")

REQUEST_KEYS = frozenset(
    {
        "invocation_id",
        "input",
        "agent",
        "context_policy",
        "memory_retrieval",
        "cache",
        "ingestion",
        "deadline_ms",
    }
)
AGENT_KEYS = frozenset(
    {"provider", "model", "instructions", "declarations", "generation_config", "name"}
)
CACHE_KEYS = frozenset({"ttl_ms", "min_prefix_tokens"})
INGESTION_MODES = ("off", "on_success", "durable")
DEFAULT_DEADLINE_MS = 60_000
MAX_DEADLINE_MS = 600_000
DEFAULT_CACHE_TTL_MS = 3_600_000
_PROVIDER_STATUS = {
    "provider_rate_limited": 429,
    "provider_timeout": 504,
    "provider_unavailable": 503,
    "provider_auth_failed": 502,
    "provider_rejected": 502,
    "provider_bad_response": 502,
    "provider_output_too_large": 502,
}


@dataclass(frozen=True)
class Agent:
    provider: str
    model: str
    name: str
    instructions: str | None
    declarations: list[dict]
    generation_config: dict | None


@dataclass(frozen=True)
class InvocationRequest:
    invocation_id: str
    input: dict
    agent: Agent
    context: context_build.ContextRequest
    cache_ttl_ms: int | None  # None: off
    cache_min_tokens: int
    ingestion: str
    deadline_ms: int
    fingerprint: str


def _agent(value: Any) -> Agent:
    value = strict_object(value, AGENT_KEYS) if value is not None else {}
    provider = value.get("provider")
    if not isinstance(provider, str) or not provider:
        raise invalid("agent.provider", "is required: a connection name or fake")
    if provider != "fake":
        try:
            get_connection(provider)
        except UnknownConnection:
            raise invalid(
                "agent.provider", "names no connection in CTXADMIN_PROVIDERS (or use fake)"
            ) from None
    model = value.get("model")
    if not isinstance(model, str) or not model.strip() or len(model) > 128:
        raise invalid("agent.model", "must be a model name of at most 128 characters")
    name = value.get("name", "model")
    if not isinstance(name, str) or not 1 <= len(name) <= 128 or name == "user":
        raise invalid("agent.name", "must be an author name (1-128 characters, not user)")
    declarations = value.get("declarations", [])
    if not isinstance(declarations, list) or not all(
        isinstance(d, dict) and isinstance(d.get("name"), str) for d in declarations
    ):
        raise invalid("agent.declarations", "must be a list of {name, description?, parameters?}")
    return Agent(
        provider=provider,
        model=model,
        name=name,
        instructions=value.get("instructions"),
        declarations=declarations,
        generation_config=value.get("generation_config"),
    )


def parse_request(body: Any) -> InvocationRequest:
    """Everything is validated before anything is written."""
    strict_object(body, REQUEST_KEYS)
    invocation_id = body.get("invocation_id")
    if not isinstance(invocation_id, str) or path_segment_error("sid", invocation_id):
        raise invalid("invocation_id", "is required: 1-128 characters from A-Z a-z 0-9 . _ : @ -")
    if "input" not in body:
        raise invalid("input", "is required")
    try:
        content = validate_content(body["input"], "input", services.event_limits())
    except EventError as exc:
        raise invalid(exc.path, exc.message) from None
    if content.get("role", "user") != "user":
        raise invalid("input.role", "must be user")
    agent = _agent(body.get("agent"))
    memory = body.get("memory_retrieval")
    if memory is not None:
        memory = dict(strict_object(memory, context_build.MEMORY_KEYS - {"query"}))
        memory.setdefault("query", _text(content) or " ")
    context = context_build.parse_request(
        {
            "current_input": body["input"],
            "instructions": agent.instructions,
            "generation_config": agent.generation_config,
            "tools": agent.declarations or None,
            "policy": body.get("context_policy"),
            **({"memory": memory} if memory is not None else {}),
        }
    )
    cache = body.get("cache", {})
    ttl_ms: int | None = None
    min_tokens = 0
    if cache not in (None, "off", False):
        cache = strict_object(cache, CACHE_KEYS)
        ttl_ms = cache.get("ttl_ms", DEFAULT_CACHE_TTL_MS)
        if isinstance(ttl_ms, bool) or not isinstance(ttl_ms, int) or ttl_ms < 1000:
            raise invalid("cache.ttl_ms", "must be an integer >= 1000")
        if ttl_ms > settings.CTXADMIN_CACHE_MAX_TTL_MS:
            raise invalid("cache.ttl_ms", f"must be at most {settings.CTXADMIN_CACHE_MAX_TTL_MS}")
        min_tokens = cache.get("min_prefix_tokens", 1024)
        if isinstance(min_tokens, bool) or not isinstance(min_tokens, int) or min_tokens < 0:
            raise invalid("cache.min_prefix_tokens", "must be an integer >= 0")
    ingestion = body.get("ingestion", "off")
    if ingestion not in INGESTION_MODES:
        raise invalid("ingestion", f"must be one of {list(INGESTION_MODES)}")
    deadline_ms = body.get("deadline_ms", DEFAULT_DEADLINE_MS)
    if (
        isinstance(deadline_ms, bool)
        or not isinstance(deadline_ms, int)
        or not (1 <= deadline_ms <= MAX_DEADLINE_MS)
    ):
        raise invalid("deadline_ms", f"must be an integer from 1 to {MAX_DEADLINE_MS}")
    return InvocationRequest(
        invocation_id=invocation_id,
        input=content,
        agent=agent,
        context=context,
        cache_ttl_ms=ttl_ms,
        cache_min_tokens=min_tokens,
        ingestion=ingestion,
        deadline_ms=deadline_ms,
        fingerprint=fingerprint({k: v for k, v in body.items() if k != "deadline_ms"}),
    )


def _text(content: dict) -> str:
    return " ".join(p["text"] for p in content.get("parts", []) if isinstance(p.get("text"), str))


# --------------------------------------------------------------------------- running


def run(app: App, user_id: str, session: Session, request: InvocationRequest) -> tuple[dict, bool]:
    """(the response, whether this call ran it: False when it answers a stored result)."""
    started = time.monotonic()
    deadline = started + request.deadline_ms / 1000
    try:
        row = Invocation.objects.create(
            session=session,
            invocation_id=request.invocation_id,
            status=Invocation.RUNNING,
            provider=request.agent.provider,
            model=request.agent.model,
            request_fingerprint=request.fingerprint,
        )
    except IntegrityError:
        return _replay(session, request), False
    input_event_id = f"{request.invocation_id}.input"
    try:
        # The context: the history so far, with the input as the current input (compacted
        # first under token pressure). A budget error stores nothing.
        built, contents, history_items, policy = _context(session, request, deadline)
        row.pre_compaction_id = built.accounting.get("compaction_id")
        row.memory_hits = built.accounting.get("memory_hits", 0)
        # The input, durable before the provider is called.
        services.append_events(
            app,
            user_id,
            session.session_id,
            [
                {
                    "event_id": input_event_id,
                    "invocation_id": request.invocation_id,
                    "author": "user",
                    "content": request.input,
                }
            ],
        )
        row.input_event_id = input_event_id
        # 3. The prefix cache.
        cache, cached_content, new_contents = _cache(
            app, user_id, request, history_items, contents, deadline
        )
        row.cache_status, row.cache_reason = cache["status"], cache.get("reason") or ""
        # 4. The model.
        provider_started = time.monotonic()
        generation = _call_model(
            request,
            new_contents if cached_content else contents,
            cached_content,
            cache.get("cached_tokens"),
            deadline,
        )
        row.provider_ms = round((time.monotonic() - provider_started) * 1000, 3)
        calls = [p for p in generation.parts if "function_call" in p]
        usage = {
            key: value
            for key, value in (
                ("prompt_token_count", generation.input_tokens),
                ("candidates_token_count", generation.output_tokens),
                ("cached_content_token_count", generation.cached_tokens),
            )
            if value is not None
        }
        model_event_id = f"{request.invocation_id}.model"
        services.append_events(
            app,
            user_id,
            session.session_id,
            [
                {
                    "event_id": model_event_id,
                    "invocation_id": request.invocation_id,
                    "author": request.agent.name,
                    "content": {"role": "model", "parts": generation.parts},
                    "turn_complete": not calls,
                    "usage_metadata": usage,
                    # The cache's outcome without an empty reason (never a resource name).
                    "custom_metadata": {
                        "cache": {k: v for k, v in cache.items() if k != "reason" or v}
                    },
                }
            ],
        )
        row.output_event_ids = [model_event_id]
        row.function_calls = len(calls)
        row.input_tokens, row.output_tokens = generation.input_tokens, generation.output_tokens
        row.cached_tokens = generation.cached_tokens
        # The turn is complete: the append queued an automatic compaction check if due.
        queued = (
            Checkpoint.objects.filter(session=session, status__in=("pending", "running"))
            .values_list("id", flat=True)
            .first()
            if policy.automatic
            else None
        )
        # 5. Ingestion.
        ingestion = _ingest(app, user_id, session, request.ingestion)
        if ingestion.get("job_id"):
            row.ingestion_job_id = ingestion["job_id"]
    except ProviderError as exc:
        _finish(row, started, Invocation.FAILED, exc.code)
        raise ServiceError(
            exc.code,
            "The model provider did not produce a usable answer; the input is stored.",
            status_code=_PROVIDER_STATUS.get(exc.code, 502),
            details={"invocation_id": request.invocation_id, "status": exc.status},
            headers={"Retry-After": str(int(exc.retry_after_s) + 1)}
            if exc.retry_after_s is not None
            else None,
        ) from None
    except ServiceError as exc:
        if not row.input_event_id:
            # Refused before anything was stored: the same id may be sent again.
            row.delete()
            raise
        _finish(row, started, Invocation.FAILED, exc.code)
        raise
    except BaseException:
        _finish(row, started, Invocation.FAILED, "internal_error")
        raise
    _finish(row, started, Invocation.COMPLETED, "")
    response = _response(row, generation.parts, cache, ingestion, built.accounting)
    response["compaction"]["queued_id"] = str(queued) if queued else None
    logger.info(
        "invocation",
        extra={
            "app": app.name,
            "session_pk": session.pk,
            "provider": request.agent.provider,
            "cache": row.cache_status,
            "function_calls": row.function_calls,
            "provider_ms": row.provider_ms,
            "total_ms": row.total_ms,
        },
    )
    return response, True


def _finish(row: Invocation, started: float, status: str, code: str) -> None:
    row.status = status
    row.error_code = code
    row.total_ms = round((time.monotonic() - started) * 1000, 3)
    row.completed_at = timezone.now()
    row.save()


def _context(session: Session, request: InvocationRequest, deadline: float):
    """The built context, the provider contents and the history items they came from."""
    built = context_build.build_context(session, request.context)
    policy, _source = compaction.effective_policy(session)
    total = built.accounting["tokens"]["total"]
    if (
        policy.automatic
        and policy.token_threshold
        and total >= policy.token_threshold
        and time.monotonic() < deadline
    ):
        checkpoint = compaction.run_pre_request(
            session, current_input_tokens=built.accounting["tokens"]["current_input"]
        )
        if checkpoint is not None and checkpoint.status == Checkpoint.ACTIVE:
            built = context_build.build_context(session, request.context)
            built.accounting["compaction_id"] = str(checkpoint.compaction_id)
    envelope = json.loads(built.envelope_json)
    history = [item for item in envelope["history"] if item.get("content")]
    contents = [item["content"] for item in history]
    contents += [item["content"] for item in envelope["memory"]]
    contents.append(envelope["current_input"])
    return built, contents, history, policy


def _cache(app, user_id, request, history, contents, deadline):
    """(cache metadata, the cached resource name or None, the contents after the prefix)."""
    if request.cache_ttl_ms is None:
        return {"status": "off"}, None, contents
    provider = _cache_provider(request.agent.provider)
    if provider is None:
        return {"status": "bypass", "reason": "unsupported_provider"}, None, contents
    # The stable prefix: instructions, tools and the history up to the newest checkpoint
    # (it stays the same between compactions; what follows it is sent every time).
    cut = max((i + 1 for i, item in enumerate(history) if "checkpoint_id" in item), default=0)
    prefix_contents = [item["content"] for item in history[:cut]]
    tools = (
        [{"functionDeclarations": request.agent.declarations}] if request.agent.declarations else []
    )
    prefix_body = {
        "contents": prefix_contents,
        "tools": tools,
        **(
            {"system_instruction": request.agent.instructions} if request.agent.instructions else {}
        ),
    }
    if not (request.agent.instructions or tools or prefix_contents):
        return {"status": "bypass", "reason": "below_minimum"}, None, contents
    try:
        acquire = cache_registry.AcquireRequest(
            scope=cache_keys.parse_scope(
                {
                    "provider": provider,
                    "user_id": user_id,
                    "model": request.agent.model,
                    "policy": {"min_prefix_tokens": request.cache_min_tokens},
                },
                app.name,
                cache_registry.limits(),
            ),
            prefix=cache_keys.parse_prefix(prefix_body),
            ttl_ms=request.cache_ttl_ms,
            timeout_ms=max(1, int((deadline - time.monotonic()) * 1000)),
        )
    except cache_keys.CacheInputError:
        return {"status": "bypass", "reason": "unsupported_prefix"}, None, contents
    # The cache may take at most half of what is left: the model call needs the rest.
    outcome = cache_registry.acquire(
        app, acquire, deadline=time.monotonic() + (deadline - time.monotonic()) / 2
    )
    meta = {
        "status": outcome.status,
        "reason": outcome.reason,
        "cached_tokens": outcome.cached_tokens,
        "scope_fingerprint": outcome.scope_fingerprint,
        "prefix_fingerprint": outcome.prefix_fingerprint,
    }
    if outcome.lease is None:
        return meta, None, contents
    try:
        resolved = cache_registry.resolve(app, outcome.lease)
    except cache_registry.LeaseError as exc:
        return {**meta, "status": "bypass", "reason": exc.code}, None, contents
    return meta, resolved.resource_name, contents[len(prefix_contents) :]


def _cache_provider(provider: str) -> str | None:
    if provider == "fake":
        return "fake" if "fake" in settings.CTXADMIN_CACHE_PROVIDERS else None
    connection = get_connection(provider)
    if (
        connection.kind == "gemini"
        and "gemini" in settings.CTXADMIN_CACHE_PROVIDERS
        and connection.base_url.rstrip("/") == settings.CTXADMIN_GEMINI_BASE_URL.rstrip("/")
    ):
        return "gemini"
    return None


def _call_model(request, contents, cached_content, cached_tokens, deadline):
    agent = request.agent
    arguments = {
        "model": agent.model,
        "instructions": None if cached_content else agent.instructions,
        "tools": [] if cached_content else agent.declarations,
        "contents": contents,
        "deadline": deadline,
        "generation_config": agent.generation_config,
        "cached_content": cached_content,
    }
    if agent.provider == "fake":
        return fake_model.generate(**arguments, cached_tokens=cached_tokens)
    from ctxadmin.providers.generate import generate

    return generate(get_connection(agent.provider), **arguments)


def _ingest(app: App, user_id: str, session: Session, mode: str) -> dict:
    if mode == "off":
        return {"mode": "off"}
    from memory.outbox import admission as outbox_admission

    if mode == "on_success":
        admission = outbox_admission.admit_on_success(app, user_id, session.session_id)
    else:
        admission = outbox_admission.admit(
            app,
            user_id,
            session.session_id,
            after_seq=outbox_admission.next_after_seq(app, user_id, session.session_id),
        )
    if admission is None:
        return {"mode": mode, "job_id": None}
    return {"mode": mode, "job_id": str(admission.job.pk), "phase": admission.job.phase}


def _response(row: Invocation, parts, cache: dict, ingestion: dict, accounting: dict) -> dict:
    return {
        "invocation_id": row.invocation_id,
        "status": row.status,
        "content": {"role": "model", "parts": parts},
        "function_calls": [p["function_call"] for p in parts if "function_call" in p],
        "usage": {
            "input_tokens": row.input_tokens,
            "output_tokens": row.output_tokens,
            "cached_tokens": row.cached_tokens,
        },
        "cache": cache,
        "compaction": {
            "pre_request_id": str(row.pre_compaction_id) if row.pre_compaction_id else None,
            "queued_id": None,
        },
        "ingestion": ingestion,
        "context": {
            "tokens": accounting["tokens"]["total"],
            "memory_hits": accounting.get("memory_hits", 0),
            "events": accounting["events"]["selected"],
        },
        "event_ids": {"input": row.input_event_id, "output": list(row.output_event_ids)},
        "timings": {"provider_ms": row.provider_ms, "total_ms": row.total_ms},
    }


def _replay(session: Session, request: InvocationRequest) -> dict:
    row = Invocation.objects.get(session=session, invocation_id=request.invocation_id)
    if row.request_fingerprint != request.fingerprint:
        raise ServiceError(
            "invocation_conflict",
            "This invocation id was used for a different request.",
            status_code=409,
            details={"invocation_id": request.invocation_id},
        )
    if row.status != Invocation.COMPLETED:
        raise ServiceError(
            "invocation_" + ("in_progress" if row.status == Invocation.RUNNING else "failed"),
            "This invocation is still running."
            if row.status == Invocation.RUNNING
            else "This invocation failed; retry with a new invocation id.",
            status_code=409,
            details={"invocation_id": request.invocation_id, "error_code": row.error_code},
        )
    from sessions_app.models import Event

    parts: list = []
    for content in Event.objects.filter(
        session=session, event_id__in=row.output_event_ids
    ).values_list("content", flat=True):
        parts.extend((content or {}).get("parts", []))
    cache = {"status": row.cache_status, "cached_tokens": row.cached_tokens}
    if row.cache_reason:
        cache["reason"] = row.cache_reason
    ingestion = {"job_id": str(row.ingestion_job_id) if row.ingestion_job_id else None}
    accounting = {
        "tokens": {"total": None},
        "memory_hits": row.memory_hits,
        "events": {"selected": None},
    }
    return _response(row, parts, cache, ingestion, accounting)
