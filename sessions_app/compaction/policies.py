"""Compaction policies as stored: an app's, a session's, and which one applies.

Parsing is the pure ``policy`` module's; this one adds the provider connections that
settings define, the error envelope, and the rows.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings

from ctxadmin.errors import invalid
from ctxadmin.models import App
from sessions_app.compaction.policy import (
    DEFAULT_POLICY,
    CompactionPolicy,
    PolicyError,
    parse_compaction_policy,
)
from sessions_app.models import AppCompactionPolicy, Session


def _connections() -> frozenset[str]:
    return frozenset(settings.CTXADMIN_PROVIDERS)


def validate_compaction_policy(body: Any, base: CompactionPolicy | None = None) -> CompactionPolicy:
    """A client's policy body, checked against the provider connections settings define; a
    bad one is a 400 naming its field."""
    try:
        return parse_compaction_policy(body, connections=_connections(), base=base)
    except PolicyError as exc:
        raise invalid(exc.path, exc.message) from None


def stored_policy(data: dict) -> CompactionPolicy:
    """A policy stored earlier (normalised). A provider connection removed from settings
    since then does not break reading it: the run reports ``summarizer_error``."""
    return parse_compaction_policy(data)


def app_policy(app: App) -> CompactionPolicy | None:
    row = AppCompactionPolicy.objects.filter(app=app).first()
    return None if row is None else stored_policy(row.policy)


def effective_policy(session: Session) -> tuple[CompactionPolicy, str]:
    """(the policy, where it comes from: ``session``, ``app`` or ``default``)."""
    if session.compaction_policy is not None:
        return stored_policy(session.compaction_policy), "session"
    row = AppCompactionPolicy.objects.filter(app_id=session.app_id).first()
    if row is not None:
        return stored_policy(row.policy), "app"
    return DEFAULT_POLICY, "default"


def set_app_policy(app: App, body: Any) -> CompactionPolicy:
    policy = validate_compaction_policy(body)
    AppCompactionPolicy.objects.update_or_create(app=app, defaults={"policy": policy.as_dict()})
    return policy


def clear_app_policy(app: App) -> None:
    AppCompactionPolicy.objects.filter(app=app).delete()


def set_session_policy(session: Session, body: Any) -> CompactionPolicy:
    policy = validate_compaction_policy(body)
    Session.objects.filter(pk=session.pk).update(compaction_policy=policy.as_dict())
    session.compaction_policy = policy.as_dict()
    return policy


def clear_session_policy(session: Session) -> None:
    Session.objects.filter(pk=session.pk).update(compaction_policy=None)
    session.compaction_policy = None
