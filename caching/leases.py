"""Leases on installed caches: signed (entry, generation, app) tokens that ``acquire`` hands
out, and ``resolve``, which turns a live one into the provider's resource name for the
invocation runner (never an endpoint). ``invalidate`` bumps the scope's generation and TTL
expiry retires the entry: older leases then resolve to ``lease_expired``."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

from django.core import signing
from django.db import connection

from caching import crypto
from ctxadmin.models import App

LEASE_SALT = "ctxadmin.cache.lease"


def sign_lease(app: App, entry_id: uuid.UUID, generation: int) -> str:
    return signing.dumps([entry_id.hex, generation, app.pk], salt=LEASE_SALT, compress=False)


class LeaseError(Exception):
    """``code``: ``lease_invalid`` (not a lease of this app) or ``lease_expired``."""

    def __init__(self, code: str):
        super().__init__(code)
        self.code = code


@dataclass(frozen=True)
class Resolved:
    resource_name: str
    provider: str
    model: str
    expires_at: datetime
    cached_tokens: int | None

    def __repr__(self) -> str:
        return f"Resolved(provider={self.provider!r}, model={self.model!r}, <resource hidden>)"


def resolve(app: App, lease: str) -> Resolved:
    """The provider resource behind a lease, for the invocation runner (never an endpoint)."""
    try:
        entry_hex, generation, app_pk = signing.loads(lease, salt=LEASE_SALT)
        entry_id = uuid.UUID(hex=entry_hex)
    except (signing.BadSignature, ValueError, TypeError):
        raise LeaseError("lease_invalid") from None
    if app_pk != app.pk:
        raise LeaseError("lease_invalid")
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT e.state, e.generation, s.generation, e.expires_at > now(), e.resource, "
            "e.expires_at, e.cached_tokens, s.provider, s.model "
            "FROM caching_cacheentry e JOIN caching_cachescope s ON s.id = e.scope_id "
            "WHERE e.id = %s AND e.app_id = %s",
            [entry_id, app.pk],
        )
        row = cursor.fetchone()
    if row is None or row[0] != "active" or not (row[1] == row[2] == generation) or not row[3]:
        raise LeaseError("lease_expired")
    name = crypto.decrypt(row[4])
    if name is None:
        raise LeaseError("lease_expired")
    return Resolved(name, row[7], row[8], row[5], row[6])
