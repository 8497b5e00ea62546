"""A user's erasure across the domains: one lock per (app, user) and the erasers of each.

Memory's user erasure (``memory.erasure.erase_user``) is the one entry point; what else a
user reaches without a session (their tokens, ``user:`` state, ``user:`` artifacts) belongs
to other domains, which register an eraser here when Django starts (as delegated
credentials register their resolver), so the ground orders them without importing them.

The lock orders every write that outlives a request's transaction after any erasure of its
user: an erasure takes it exclusively, those writes take it shared (they do not wait for each
other, only for an erasure). A write that took it before the erasure commits first and is
erased with the rest; one that comes after the erasure is a new write.
"""

from __future__ import annotations

from collections.abc import Callable

from django.db import connection

from ctxadmin.canonical import fingerprint
from ctxadmin.models import App

# The first key of the two-key advisory lock taken per (app, user) ("mem\0": memory took it
# first, and memory's writes and erasures keep taking the same one).
_LOCK_NAMESPACE = 0x6D656D00


def user_fingerprint(app: App | int, user_id: str) -> str:
    """SHA-256 of the canonical JSON of ``{"app_id", "user_id"}``: names a user in records
    that outlive their erasure without carrying the user id."""
    app_id = app if isinstance(app, int) else app.pk
    return fingerprint({"app_id": app_id, "user_id": user_id})


def lock_user(app: App | int, user_id: str, *, shared: bool = False) -> None:
    """The user's erasure lock, to the end of the current transaction."""
    if not connection.in_atomic_block:
        raise RuntimeError("lock_user needs a transaction")
    key = int(user_fingerprint(app, user_id)[:8], 16) - 2**31
    function = "pg_advisory_xact_lock_shared" if shared else "pg_advisory_xact_lock"
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {function}(%s, %s)", [_LOCK_NAMESPACE, key])


#: ``(app, user_id) -> {count name: how many}``: removes (or ends) what the user reaches in
#: one domain. Called in the erasure's transaction, under the exclusive lock.
UserEraser = Callable[[App, str], dict[str, int]]
_ERASERS: list[UserEraser] = []


def register_user_eraser(eraser: UserEraser) -> UserEraser:
    """Register a domain's eraser (an app's ``ready``; usable as a decorator)."""
    if eraser not in _ERASERS:
        _ERASERS.append(eraser)
    return eraser


def erase_user_reach(app: App, user_id: str) -> dict[str, int]:
    """Every registered eraser, in the caller's transaction (which holds the lock); their
    counts, merged."""
    if not connection.in_atomic_block:
        raise RuntimeError("erase_user_reach needs a transaction")
    counts: dict[str, int] = {}
    for eraser in _ERASERS:
        for name, count in eraser(app, user_id).items():
            counts[name] = counts.get(name, 0) + int(count)
    return counts
