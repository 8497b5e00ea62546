"""Memory governance per app: consent, time to live, retention and legal holds.

The policy (``MemoryPolicy``, absent: the defaults) says whether a user's consent is needed
before anything of theirs is remembered or recalled, how long new entries live
(``default_ttl_seconds`` → ``expires_at``), how long they must be kept
(``retention_days`` → ``retain_until``) and whether the whole app is under legal hold.
Consent records and per-user legal holds are kept per (app, user).

Consent is evaluated fail-closed: when the policy or the consent record cannot be read,
the request is refused as if consent were missing.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import InterfaceError, OperationalError, connection, transaction

from ctxadmin.errors import ServiceError, invalid, not_found
from ctxadmin.models import App
from ctxadmin.timestamps import iso_timestamp
from memory.extractors import ExtractorSpec, stored_extractor
from memory.inputs import (
    DEFAULT_POLICY,
    POLICY_KEYS,
    Policy,
    parse_consent,
    parse_legal_hold,
    parse_memory_policy,
)
from memory.models import Consent, LegalHold, MemoryPolicy
from memory.scope import lock_scope

logger = logging.getLogger("ctxadmin.memory")


def policy_state(app: App) -> dict:
    row = MemoryPolicy.objects.filter(app=app).first()
    if row is None:
        return {**DEFAULT_POLICY.as_dict(), "source": "default", "updated_at": None}
    return {
        **{name: getattr(row, name) for name in POLICY_KEYS},
        "extractor": stored_extractor(row.extractor).as_dict(),
        "source": "app",
        "updated_at": iso_timestamp(row.updated_at),
    }


def app_extractor(app: App) -> ExtractorSpec:
    """The extractor the app's policy names (none without a policy)."""
    row = MemoryPolicy.objects.filter(app=app).only("extractor").first()
    return stored_extractor(row.extractor if row is not None else {})


def set_policy(app: App, body: Any, key_prefix: str) -> dict:
    policy = parse_memory_policy(body, frozenset(settings.CTXADMIN_PROVIDERS))
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO memory_memorypolicy
                (app_id, consent_required, default_ttl_seconds, retention_days, legal_hold,
                 ingestion, extractor, updated_at, updated_by)
            VALUES (%s, %s, %s, %s, %s, %s, %s::jsonb, now(), %s)
            ON CONFLICT (app_id) DO UPDATE SET
                consent_required = EXCLUDED.consent_required,
                default_ttl_seconds = EXCLUDED.default_ttl_seconds,
                retention_days = EXCLUDED.retention_days,
                legal_hold = EXCLUDED.legal_hold,
                ingestion = EXCLUDED.ingestion,
                extractor = EXCLUDED.extractor,
                updated_at = now(),
                updated_by = EXCLUDED.updated_by
            """,
            [
                app.pk,
                policy.consent_required,
                policy.default_ttl_seconds,
                policy.retention_days,
                policy.legal_hold,
                policy.ingestion,
                json.dumps(policy.extractor.as_dict() if policy.extractor.extracts else {}),
                key_prefix,
            ],
        )
    # The extractor by its kind only (its connection and model are configuration, not logged).
    logged = {**policy.as_dict(), "extractor": policy.extractor.kind}
    logger.info("memory_policy_set", extra={"app": app.pk, **logged})
    return policy_state(app)


# ----------------------------------------------------------------------------- consent


@dataclass(frozen=True)
class WriteTerms:
    """What the policy stamps on a new entry."""

    ttl_seconds: int | None
    retention_days: int | None


def _read_terms(app: App, user_id: str) -> tuple[Policy, bool | None]:
    """The app's policy and the user's consent (None: never recorded), in one statement."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT p.consent_required, p.default_ttl_seconds, p.retention_days, p.legal_hold,
                   (SELECT c.granted FROM memory_consent c
                     WHERE c.app_id = %s AND c.user_id = %s)
              FROM (SELECT 1) AS one
              LEFT JOIN memory_memorypolicy p ON p.app_id = %s
            """,
            [app.pk, user_id, app.pk],
        )
        required, ttl, retention, hold, granted = cursor.fetchone()
    if required is None:  # no policy row
        return DEFAULT_POLICY, granted
    return Policy(required, ttl, retention, hold), granted


def _consent_error(reason: str) -> ServiceError:
    return ServiceError(
        "consent_required",
        "This app requires the user's consent to long-term memory, and it is not granted.",
        status_code=403,
        details={"reason": reason},
    )


def _checked_terms(app: App, user_id: str) -> Policy:
    try:
        policy, granted = _read_terms(app, user_id)
    except (OperationalError, InterfaceError):
        # The database is unreachable (a restart, a failover): refused all the same, as
        # 503 ``database_unavailable``, which tells the client to retry, not that consent
        # is missing.
        raise
    except Exception as exc:  # fail closed: a policy that cannot be read refuses
        logger.warning(
            "memory_consent_unverifiable", extra={"app": app.pk, "error": type(exc).__name__}
        )
        raise _consent_error("policy_unavailable") from None
    if policy.consent_required and granted is not True:
        raise _consent_error("not_granted" if granted is False else "not_recorded")
    return policy


def require_read_consent(app: App, user_id: str) -> None:
    """Refuse (403 ``consent_required``) a recall for a user whose consent the app's policy
    requires and does not have."""
    _checked_terms(app, user_id)


def write_terms(app: App, user_id: str, ttl_seconds: int | None = None) -> WriteTerms:
    """Refuse a write as ``require_read_consent`` does; else the TTL and retention to stamp.

    An entry's own ``ttl_seconds`` replaces the policy's ``default_ttl_seconds`` within the
    policy's rules: at most that default (the app's ceiling), and, as the policy's own TTL,
    at least ``retention_days`` (an entry cannot expire before it may be erased). A legal
    hold keeps an expired entry (invisible) until the hold ends, whatever its TTL."""
    policy = _checked_terms(app, user_id)
    if ttl_seconds is None:
        return WriteTerms(policy.default_ttl_seconds, policy.retention_days)
    ceiling = policy.default_ttl_seconds
    if ceiling is not None and ttl_seconds > ceiling:
        raise invalid("ttl_seconds", f"must be at most the app's default_ttl_seconds ({ceiling})")
    floor = None if policy.retention_days is None else policy.retention_days * 86400
    if floor is not None and ttl_seconds < floor:
        raise invalid(
            "ttl_seconds",
            f"must be at least the app's retention_days in seconds ({floor}): an entry "
            "cannot expire before it may be erased",
        )
    return WriteTerms(ttl_seconds, policy.retention_days)


def consent_state(app: App, user_id: str) -> dict:
    row = Consent.objects.filter(app=app, user_id=user_id).first()
    required = MemoryPolicy.objects.filter(app=app, consent_required=True).exists()
    return {
        "granted": None if row is None else row.granted,
        "consent_required": required,
        "updated_at": None if row is None else iso_timestamp(row.updated_at),
    }


def set_consent(app: App, user_id: str, body: Any, key_prefix: str) -> dict:
    granted = parse_consent(body)
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO memory_consent (app_id, user_id, granted, updated_at, updated_by)
            VALUES (%s, %s, %s, now(), %s)
            ON CONFLICT (app_id, user_id) DO UPDATE SET
                granted = EXCLUDED.granted, updated_at = now(), updated_by = EXCLUDED.updated_by
            """,
            [app.pk, user_id, granted, key_prefix],
        )
    logger.info("memory_consent_set", extra={"app": app.pk, "granted": granted})
    return consent_state(app, user_id)


# ----------------------------------------------------------------------------- legal hold


def legal_hold_state(app: App, user_id: str) -> dict:
    row = LegalHold.objects.filter(app=app, user_id=user_id).first()
    app_hold = MemoryPolicy.objects.filter(app=app, legal_hold=True).exists()
    return {
        "legal_hold": row is not None,
        "app_legal_hold": app_hold,
        "since": None if row is None else iso_timestamp(row.created_at),
    }


def place_legal_hold(app: App, user_id: str, body: Any, key_prefix: str) -> dict:
    """Idempotent: a second hold keeps the first one's time."""
    parse_legal_hold(body)
    with transaction.atomic():
        lock_scope(app, user_id)  # ordered with any erasure of the scope
        with connection.cursor() as cursor:
            cursor.execute(
                """
                INSERT INTO memory_legalhold (app_id, user_id, created_at, created_by)
                VALUES (%s, %s, now(), %s)
                ON CONFLICT (app_id, user_id) DO NOTHING
                """,
                [app.pk, user_id, key_prefix],
            )
    logger.info("memory_legal_hold_placed", extra={"app": app.pk})
    return legal_hold_state(app, user_id)


def release_legal_hold(app: App, user_id: str) -> None:
    deleted, _ = LegalHold.objects.filter(app=app, user_id=user_id).delete()
    if not deleted:
        raise not_found()
    logger.info("memory_legal_hold_released", extra={"app": app.pk})


def refuse_if_held(app: App, user_id: str) -> None:
    """409 ``legal_hold`` when the app or this user is under legal hold. Inside an erasure's
    transaction the policy row is read ``FOR SHARE``, so the hold cannot be lifted or placed
    underneath it."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT legal_hold FROM memory_memorypolicy WHERE app_id = %s FOR SHARE", [app.pk]
        )
        row = cursor.fetchone()
        if row is not None and row[0]:
            raise _held("app")
        cursor.execute(
            "SELECT 1 FROM memory_legalhold WHERE app_id = %s AND user_id = %s",
            [app.pk, user_id],
        )
        if cursor.fetchone() is not None:
            raise _held("user")


def _held(scope: str) -> ServiceError:
    return ServiceError(
        "legal_hold",
        "This memory is under legal hold and cannot be erased.",
        status_code=409,
        details={"hold": scope},
    )


# ----------------------------------------------------------------------------- expiry

PURGE_BATCH_SIZE = 1000


# An expired entry no retention period and no legal hold keeps (the entry is aliased ``e``).
_PURGEABLE = """
    e.expires_at IS NOT NULL AND e.expires_at <= now()
    AND (e.retain_until IS NULL OR e.retain_until <= now())
    AND NOT EXISTS (SELECT 1 FROM memory_memorypolicy p
                     WHERE p.app_id = e.app_id AND p.legal_hold)
    AND NOT EXISTS (SELECT 1 FROM memory_legalhold h
                     WHERE h.app_id = e.app_id AND h.user_id = e.user_id)
"""


def purge_expired_batch(batch_size: int = PURGE_BATCH_SIZE) -> int:
    """Delete up to ``batch_size`` expired entries (claimed with SKIP LOCKED, oldest expiry
    first); the count deleted. Entries still retained, of an app under legal hold or of a
    user under legal hold stay (invisible to reads) until that ends."""
    with connection.cursor() as cursor:
        cursor.execute(
            # The batch is claimed once (MATERIALIZED): a subquery under IN may be scanned
            # again while the DELETE runs, and a rescan skips the rows it already deleted
            # and claims more, past the bound.
            f"""
            WITH batch AS MATERIALIZED (
                SELECT e.id FROM memory_memoryentry e
                 WHERE {_PURGEABLE}
                 ORDER BY e.expires_at
                 LIMIT %s
                 FOR UPDATE OF e SKIP LOCKED)
            DELETE FROM memory_memoryentry WHERE id IN (SELECT id FROM batch)
            """,  # noqa: S608 - a constant condition
            [batch_size],
        )
        return cursor.rowcount


def release_expired_key(app: App, user_id: str, key: str) -> None:
    """Free an idempotency key held by an expired, purgeable entry, so a new entry can take
    it (an expired entry still retained or held keeps its key)."""
    release_expired_keys(app, user_id, [key])


def release_expired_keys(app: App, user_id: str, keys: list[str]) -> None:
    """``release_expired_key`` for several keys in one statement."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            DELETE FROM memory_memoryentry e
             WHERE e.app_id = %s AND e.user_id = %s AND e.idempotency_key = ANY(%s)
               AND {_PURGEABLE}
            """,  # noqa: S608 - a constant condition
            [app.pk, user_id, list(keys)],
        )


def ingests_on_success(app: App) -> bool:
    """Whether the app's policy admits an ingestion job when an invocation completes."""
    return MemoryPolicy.objects.filter(app=app, ingestion="on_success").exists()
