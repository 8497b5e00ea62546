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

import json
import logging
import secrets

import pytest
from django.test import RequestFactory
from rest_framework.test import APIClient

from caching.adapters import fake_adapter
from config.celery import app as celery_app
from ctxadmin.telemetry import JsonFormatter
from tests.conftest import make_operator, make_tenant
from tests.service.leaks.conftest import (
    BASE,
    TAG,
    Canaries,
    LogTap,
    every_logger_at_debug,
)
from tests.service.leaks.flows import (
    Run,
    console_pages,
    database_text,
    diagnostics,
    seed_cache,
    seed_invocations_and_tool_tokens,
    seed_keys,
    seed_memory,
    seed_model_summarizer,
    seed_sessions,
    seed_wire_invocations,
)
from tests.service.leaks.mcp_flows import seed_mcp
from tests.sessions_helpers import call, response, text

pytestmark = pytest.mark.django_db(transaction=True)


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
        seed_mcp(run)
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
    from memory.similarity import normalised
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
    # Each ordinary text is a memory of the scope: the adds above hold them already, so
    # ingestion finds each the same memory (the same normalised text) and stores it once.
    held = {normalised(c) for c in MemoryEntry.objects.values_list("content", flat=True)}
    for n, words in enumerate(ORDINARY_TEXTS):
        assert ingested.get(f"in-o{n}") in (None, words.strip()), n
        assert normalised(words) in held, n
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
    for start in range(0, len(events), 400):  # an append takes at most 500 events
        batch = {"events": events[start : start + 400]}
        answer = api.post(f"{BASE}/sessions/compact/events", batch, format="json")
        assert answer.status_code == 201, answer.content[:400]
    policy = {"token_threshold": 10, "retain_recent_exchanges": 1}
    api.put(f"{BASE}/sessions/compact/compaction-policy", policy, format="json")
    done = api.post(f"{BASE}/sessions/compact/compactions", {}, format="json")
    assert done.status_code == 201 and done.json()["status"] == "active", done.content[:400]
    checkpoint = Checkpoint.objects.get(compaction_id=done.json()["compaction_id"])
    summary = json.dumps(checkpoint.summary, ensure_ascii=False)
    assert checkpoint.summary["user_requests"], summary[:400]
    assert leaked(summary + checkpoint.items_json) == []
