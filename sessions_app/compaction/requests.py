"""Compaction requests: manual ones (by compaction id, synchronous or queued), a context
build's overflow and an invocation's pre-request check.

A request is a ``Checkpoint`` row (its compaction id is the request id, unique in its
app); a requested run replaces an automatic check no worker has claimed yet.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from django.db import IntegrityError, connection, transaction

from ctxadmin.errors import ServiceError, not_found, uuid_or_404
from ctxadmin.wake import wake
from sessions_app.compaction.commit import head_unchecked
from sessions_app.compaction.policies import effective_policy
from sessions_app.compaction.triggers import RUN_COMPACTION
from sessions_app.compaction.worker import execute
from sessions_app.history import active_head, in_flight
from sessions_app.models import Checkpoint, Session
from sessions_app.store import hold_session


def _existing(session: Session, compaction_id: uuid.UUID) -> Checkpoint | None:
    """The app's compaction of this id (ids live in their app's key space: another app's
    compaction of the same id is never seen here)."""
    found = Checkpoint.objects.filter(app_id=session.app_id, compaction_id=compaction_id).first()
    if found is None:
        return None
    if found.session_id != session.pk:
        raise ServiceError(
            "compaction_id_taken",
            "This compaction id is used by another session.",
            status_code=409,
            details={"compaction_id": str(compaction_id)},
        )
    return found


def in_progress_error(session: Session) -> ServiceError:
    running = in_flight(session).values_list("compaction_id", flat=True).first()
    return ServiceError(
        "compaction_in_progress",
        "A compaction of this session is pending or running.",
        status_code=409,
        details={"compaction_id": str(running) if running else None},
    )


@dataclass(frozen=True)
class ManualRequest:
    compaction_id: uuid.UUID
    run_async: bool = False
    timeout_ms: int | None = None
    check_head: bool = False  # compare the head with expected_head (None: no checkpoint yet)
    expected_head: str | None = None
    source_event_ids: tuple[str, ...] | None = None


def request_manual(session: Session, request: ManualRequest) -> tuple[Checkpoint, bool]:
    """(the checkpoint, whether this call created it). Synchronous unless ``run_async``."""
    existing = _existing(session, request.compaction_id)
    if existing is not None:
        return existing, False
    policy, _source = effective_policy(session)
    expected_key = None  # the expected head's own key, for the check at commit
    if request.check_head:
        head_key, head = active_head(session.pk)
        if head != request.expected_head:
            raise stale_head_error(request.expected_head, head)
        expected_key = head_key
    status = Checkpoint.PENDING if request.run_async else Checkpoint.RUNNING
    try:
        with transaction.atomic():
            _take_over_pending_check(session.pk)
            row = Checkpoint.objects.create(
                id=uuid.uuid4(),
                app_id=session.app_id,
                compaction_id=request.compaction_id,
                session=session,
                status=status,
                origin="manual",
                policy=policy.as_dict(),
                source_event_ids=list(request.source_event_ids or []),
                timeout_ms=request.timeout_ms,
                check_head=request.check_head,
                expected_head=expected_key,
            )
    except IntegrityError:
        raise in_progress_error(session) from None
    if request.run_async:
        wake(RUN_COMPACTION, str(row.id))
        return row, True
    return execute(
        row,
        session,
        policy,
        timeout_ms=request.timeout_ms,
        expected_head=expected_key if request.check_head else head_unchecked,
        pinned=request.source_event_ids,
    ), True


def _take_over_pending_check(session_pk: int) -> None:
    """A requested compaction replaces an automatic check no worker has claimed yet (its
    task then finds nothing pending); a running one still makes the request a 409.

    The session row is taken first (``hold_session``)."""
    with connection.cursor() as cursor:
        hold_session(cursor, session_pk)
    Checkpoint.objects.filter(
        session_id=session_pk, status=Checkpoint.PENDING, origin="automatic"
    ).delete()


def stale_head_error(expected, current) -> ServiceError:
    return ServiceError(
        "stale_head",
        "The session's active checkpoint is not the one expected; nothing changed.",
        status_code=409,
        details={"expected_head": expected, "current_head": current},
    )


def _start_now(session: Session, origin: str, policy) -> Checkpoint:
    """A run of ``origin`` started in this request (status ``running``, its own key as its
    compaction id), replacing an unclaimed automatic check; IntegrityError when another
    compaction of the session is pending or running."""
    with transaction.atomic():
        _take_over_pending_check(session.pk)
        key = uuid.uuid4()
        return Checkpoint.objects.create(
            id=key,
            app_id=session.app_id,
            compaction_id=key,
            session=session,
            status=Checkpoint.RUNNING,
            origin=origin,
            policy=policy.as_dict(),
        )


def run_overflow(
    session: Session, current_input_tokens: int, history_limit_bytes: int | None = None
) -> Checkpoint:
    """``overflow: compress`` in a context build: compact now, within the policy's timeout,
    aiming the summary at what the rest of the history leaves of its budget."""
    policy, _source = effective_policy(session)
    try:
        row = _start_now(session, "overflow", policy)
    except IntegrityError:
        raise in_progress_error(session) from None
    return execute(
        row,
        session,
        policy,
        current_input_tokens=current_input_tokens,
        expected_head=head_unchecked,
        history_limit_bytes=history_limit_bytes,
    )


def run_pre_request(session: Session, current_input_tokens: int) -> Checkpoint | None:
    """Before an invocation's model call, under token pressure: an automatic check run now
    (the automatic limits and backoff apply), or None when one is in flight already."""
    policy, _source = effective_policy(session)
    try:
        row = _start_now(session, "automatic", policy)
    except IntegrityError:
        return None
    return execute(row, session, policy, current_input_tokens=current_input_tokens)


def get_checkpoint(session: Session, checkpoint_id: str) -> Checkpoint:
    found = Checkpoint.objects.filter(
        session=session, compaction_id=uuid_or_404(checkpoint_id)
    ).first()
    if found is None:
        raise not_found()
    return found
