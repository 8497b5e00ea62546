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

from django.conf import settings

from caching import keys as cache_keys
from caching import registry as cache_registry
from ctxadmin.errors import ServiceError
from ctxadmin.models import App
from ctxadmin.providers import generate as provider_generate
from ctxadmin.providers.base import ProviderError, get_connection
from ctxadmin.providers.generate import sendable
from memory.outbox import admission as outbox_admission
from runner import context, fake_model
from runner.inputs import InvocationRequest
from sessions_app import invocation_records as records
from sessions_app import services
from sessions_app.compaction import policies, requests
from sessions_app.models import Checkpoint, Invocation, Session

logger = logging.getLogger("ctxadmin.invocations")


_PROVIDER_STATUS = {
    "provider_rate_limited": 429,
    "provider_timeout": 504,
    "provider_unavailable": 503,
    "provider_auth_failed": 502,
    "provider_rejected": 502,
    "provider_bad_response": 502,
    "provider_output_too_large": 502,
}


def run(app: App, user_id: str, session: Session, request: InvocationRequest) -> tuple[dict, bool]:
    """(the response, whether this call ran it: False when it answers a stored result)."""
    started = time.monotonic()
    deadline = started + request.deadline_ms / 1000
    row = records.start(
        session,
        request.invocation_id,
        request.agent.provider,
        request.agent.model,
        request.fingerprint,
    )
    if row is None:
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
        queued = records.queued_compaction(session) if policy.automatic else None
        # 5. Ingestion.
        ingestion = _ingest(app, user_id, session, request.ingestion)
        if ingestion.get("job_id"):
            row.ingestion_job_id = ingestion["job_id"]
    except ProviderError as exc:
        records.finish(row, started, Invocation.FAILED, exc.code)
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
            records.forget(row)
            raise
        records.finish(row, started, Invocation.FAILED, exc.code)
        raise
    except BaseException:
        records.finish(row, started, Invocation.FAILED, "internal_error")
        raise
    records.finish(row, started, Invocation.COMPLETED, "")
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


def _context(session: Session, request: InvocationRequest, deadline: float):
    """The built context, the provider contents and the history items they came from."""
    built = context.build_context(session, request.context)
    policy, _source = policies.effective_policy(session)
    total = built.accounting["tokens"]["total"]
    if (
        policy.automatic
        and policy.token_threshold
        and total >= policy.token_threshold
        and time.monotonic() < deadline
    ):
        checkpoint = requests.run_pre_request(
            session, current_input_tokens=built.accounting["tokens"]["current_input"]
        )
        if checkpoint is not None and checkpoint.status == Checkpoint.ACTIVE:
            built = context.build_context(session, request.context)
            built.accounting["compaction_id"] = str(checkpoint.compaction_id)
    envelope = json.loads(built.envelope_json)
    history = [item for item in envelope["history"] if sendable(item.get("content"))]
    # The profile first: the same profile is the same bytes, a prefix a provider can cache.
    contents = [item["content"] for item in envelope.get("profile") or ()]
    contents += [sendable(item["content"]) for item in history]
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
    prefix_contents = [sendable(item["content"]) for item in history[:cut]]
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
    return provider_generate.generate(get_connection(agent.provider), **arguments)


def _ingest(app: App, user_id: str, session: Session, mode: str) -> dict:
    if mode == "off":
        return {"mode": "off"}
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
    row = records.stored(session, request.invocation_id)
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
    parts = records.output_parts(session, row)
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
