"""Content-free telemetry of sessions: counters and one structured log record per build."""

from __future__ import annotations

import logging

from prometheus_client import Counter, Histogram

logger = logging.getLogger("ctxadmin.context")

CONTEXT_BUILDS = Counter("ctxadmin_context_builds_total", "Context builds by outcome.", ["outcome"])
CONTEXT_EVENTS = Counter(
    "ctxadmin_context_events_total", "Events considered by context builds, by fate.", ["fate"]
)
CONTEXT_BYTES = Counter(
    "ctxadmin_context_bytes_total", "Bytes of built envelopes, by category.", ["category"]
)
CONTEXT_BUILD_SECONDS = Histogram(
    "ctxadmin_context_build_seconds",
    "Server-side time to build one context.",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
)
EVENTS_APPENDED = Counter("ctxadmin_events_appended_total", "Events stored by appends.")


def record_build(
    session, counts: dict, accounting: dict, fingerprint: str, truncated: bool, elapsed_ms: float
) -> None:
    CONTEXT_BUILDS.labels("truncated" if truncated else "ok").inc()
    CONTEXT_EVENTS.labels("selected").inc(counts["selected"])
    CONTEXT_EVENTS.labels("dropped").inc(counts["dropped"])
    for category, value in accounting["bytes"].items():
        if category != "total":
            CONTEXT_BYTES.labels(category).inc(value)
    CONTEXT_BUILD_SECONDS.observe(elapsed_ms / 1000)
    logger.info(
        "context_built",
        extra={
            "app_id": session.app_id,
            "session_pk": session.pk,
            "events": counts,
            "bytes": accounting["bytes"],
            "tokens": accounting["tokens"],
            "truncated": truncated,
            "context_fingerprint": fingerprint,
            "build_ms": round(elapsed_ms, 3),
        },
    )
