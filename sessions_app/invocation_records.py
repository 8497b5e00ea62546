"""An invocation's record (``Invocation``): started once per (session, invocation id),
finished with its outcome, read back to answer a repeated request. The runner runs the
invocation; the record and the session's rows it reads are the sessions app's."""

from __future__ import annotations

import time

from django.db import IntegrityError, transaction
from django.utils import timezone

from sessions_app import history
from sessions_app.models import Event, Invocation, Session


def start(
    session: Session, invocation_id: str, provider: str, model: str, fingerprint: str
) -> Invocation | None:
    """The running record of a new invocation; None when the session already has one of
    this id (the caller answers the stored one). The insert is its own savepoint, so a
    repeat leaves a surrounding transaction usable for reading the stored one."""
    try:
        with transaction.atomic():
            return Invocation.objects.create(
                session=session,
                invocation_id=invocation_id,
                status=Invocation.RUNNING,
                provider=provider,
                model=model,
                request_fingerprint=fingerprint,
            )
    except IntegrityError:
        return None


def finish(row: Invocation, started: float, status: str, code: str) -> None:
    """Record the outcome (``started`` is the invocation's ``time.monotonic()``)."""
    row.status = status
    row.error_code = code
    row.total_ms = round((time.monotonic() - started) * 1000, 3)
    row.completed_at = timezone.now()
    row.save()


def forget(row: Invocation) -> None:
    """Drop the record of an invocation refused before anything was stored: the same id
    may be sent again."""
    row.delete()


def stored(session: Session, invocation_id: str) -> Invocation:
    return Invocation.objects.get(session=session, invocation_id=invocation_id)


def queued_compaction(session: Session):
    """The id of the session's compaction pending or running, if any."""
    return history.in_flight(session).values_list("id", flat=True).first()


def output_parts(session: Session, row: Invocation) -> list:
    """The parts of the events the model answered with, in the order they were stored."""
    parts: list = []
    for content in Event.objects.filter(
        session=session, event_id__in=row.output_event_ids
    ).values_list("content", flat=True):
        parts.extend((content or {}).get("parts", []))
    return parts
