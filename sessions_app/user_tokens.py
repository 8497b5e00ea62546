"""User tokens: least-authority tokens for an MCP client or one agent run, not tied to a
function call. The same table, format (``ctt_<prefix>_<secret>``, shown once, stored as a
digest) and resolution as tool tokens (``sessions_app.tool_tokens``), with no invocation:
bound to one user and, when asked, one session, with no capability whose scope the minting
key lacks; they end when they expire, are revoked, their user is erased, or the key that
minted them is revoked or rotated.
"""

from __future__ import annotations

import logging
import re
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from ctxadmin.api.paths import path_segment_error
from ctxadmin.erasure import lock_user
from ctxadmin.errors import ServiceError, invalid, not_found, strict_object
from ctxadmin.keys import PREFIX_LENGTH, hash_key
from ctxadmin.models import ApiKey, App
from ctxadmin.pruning import echoed
from sessions_app.models import Session, ToolToken
from sessions_app.tool_tokens import _generate, check_minter_holds, hold_minter

logger = logging.getLogger("ctxadmin.tokens")

KEY_PREFIX_RE = re.compile(rf"^[a-z0-9]{{{PREFIX_LENGTH}}}\Z")
MINT_KEYS = frozenset({"capabilities", "session_id", "ttl_ms", "label"})
#: Attaching an artifact writes an event as the token's tool call: only a tool token can.
CAPABILITIES = tuple(c for c in ToolToken.CAPABILITIES if c != "artifact_attach")
DEFAULT_TTL_MS = 3_600_000
MAX_TTL_MS = 30 * 86_400_000  # thirty days
MAX_LABEL = 200
#: Open user tokens of one user: each is a live credential, so they are bounded.
MAX_OPEN_PER_USER = 100


def mint(app: App, user_id: str, body: Any, minter: ApiKey) -> tuple[ToolToken, str]:
    """A user token with no capability whose scope ``minter`` lacks; it ends with
    ``minter``."""
    body = strict_object(body, MINT_KEYS)
    minted_by = minter.prefix
    capabilities = body.get("capabilities")
    if (
        not isinstance(capabilities, list)
        or not capabilities
        or not all(isinstance(c, str) for c in capabilities)
    ):
        raise invalid("capabilities", "must be a non-empty list of capability names")
    unknown = sorted(set(capabilities) - set(CAPABILITIES))
    if unknown:
        raise invalid("capabilities", f"unknown capability {echoed(unknown[0])!r}")
    check_minter_holds(capabilities, minter)
    ttl_ms = body.get("ttl_ms", DEFAULT_TTL_MS)
    if isinstance(ttl_ms, bool) or not isinstance(ttl_ms, int) or not 1000 <= ttl_ms <= MAX_TTL_MS:
        raise invalid("ttl_ms", f"must be an integer from 1000 to {MAX_TTL_MS}")
    label = body.get("label", "")
    if not isinstance(label, str) or len(label) > MAX_LABEL:
        raise invalid("label", f"must be a string of at most {MAX_LABEL} characters")
    session = None
    session_id = body.get("session_id")
    if session_id is not None:
        if not isinstance(session_id, str) or path_segment_error("sid", session_id):
            raise invalid("session_id", "must be a session id")
        session = Session.objects.filter(app=app, user_id=user_id, session_id=session_id).first()
        if session is None:
            raise not_found()
    with transaction.atomic():
        lock_user(app, user_id, shared=True)  # the user's erasure revokes it
        hold_minter(minter)  # and so does its key's revocation
        open_tokens = ToolToken.objects.filter(
            app=app,
            user_id=user_id,
            invocation__isnull=True,
            revoked_at__isnull=True,
            expires_at__gt=timezone.now(),
        ).count()
        if open_tokens >= MAX_OPEN_PER_USER:
            raise ServiceError(
                "too_many_user_tokens",
                f"A user holds at most {MAX_OPEN_PER_USER} open user tokens; revoke some first.",
                status_code=429,
            )
        prefix, raw = _generate()
        token = ToolToken.objects.create(
            app=app,
            user_id=user_id,
            session=session,
            label=label,
            created_by_key=minted_by,
            capabilities=sorted({"identity", *capabilities}),
            prefix=prefix,
            token_hash=hash_key(raw),
            expires_at=timezone.now() + timedelta(milliseconds=ttl_ms),
        )
    logger.info(
        "user token minted",
        extra={"app": app.name, "token": prefix, "minted_by": minted_by, "ttl_ms": ttl_ms},
    )
    return token, raw


def user_tokens(app: App, user_id: str):
    return (
        ToolToken.objects.filter(app=app, user_id=user_id, invocation__isnull=True)
        .select_related("app", "session")
        .order_by("-created_at", "-id")
    )


STATES = ("active", "expired", "revoked")
REVOKE_KEYS = frozenset({"minted_by"})


def app_user_tokens(
    app: App,
    *,
    user_id: str | None = None,
    minted_by: str | None = None,
    state: str | None = None,
):
    """The app's user tokens of every user, newest first, narrowed by user, by the prefix of
    the key that minted them, and by state."""
    tokens = ToolToken.objects.filter(app=app, invocation__isnull=True).select_related(
        "app", "session"
    )
    if user_id is not None:
        tokens = tokens.filter(user_id=user_id)
    if minted_by is not None:
        tokens = tokens.filter(created_by_key=minted_by)
    now = timezone.now()
    if state == "active":
        tokens = tokens.filter(revoked_at__isnull=True, expires_at__gt=now)
    elif state == "expired":
        tokens = tokens.filter(revoked_at__isnull=True, expires_at__lte=now)
    elif state == "revoked":
        tokens = tokens.filter(revoked_at__isnull=False)
    return tokens.order_by("-created_at", "-id")


def parse_minted_by(value: Any, field: str) -> str:
    """An API key's prefix (what a token's ``created_by_key`` holds)."""
    if not isinstance(value, str) or not KEY_PREFIX_RE.match(value):
        raise invalid(field, f"must be an API key prefix ({PREFIX_LENGTH} letters or digits)")
    return value


def revoke_minted_by(app: App, body: Any, revoked_by: str) -> int:
    """Revoke every open user token of the app that the key with this prefix minted (any
    key of the app, revoked or not; another app's prefix or an unknown one revokes none):
    how many."""
    body = strict_object(body, REVOKE_KEYS)
    if "minted_by" not in body:
        raise invalid("minted_by", "is required")
    minted_by = parse_minted_by(body["minted_by"], "minted_by")
    revoked = ToolToken.objects.filter(
        app=app, invocation__isnull=True, created_by_key=minted_by, revoked_at__isnull=True
    ).update(revoked_at=timezone.now(), revoked_reason="deleted")
    logger.info(
        "user tokens revoked by minter",
        extra={"app": app.name, "minted_by": minted_by, "revoked": revoked, "by": revoked_by},
    )
    return revoked


def revoke(app: App, user_id: str, prefix: str, revoked_by: str) -> None:
    tokens = user_tokens(app, user_id).filter(prefix=prefix)
    if not tokens.exists():
        raise not_found()
    tokens.filter(revoked_at__isnull=True).update(
        revoked_at=timezone.now(), revoked_reason="deleted"
    )
    logger.info(
        "user token revoked", extra={"app": app.name, "token": prefix, "revoked_by": revoked_by}
    )


#: A revoked token's reason as the API shows it (``token_ended``'s ``reason``).
_REASONS = {"deleted": "revoked", "erased": "erased", "minter_revoked": "minter_revoked"}


def user_token_json(token: ToolToken) -> dict:
    now = timezone.now()
    state = (
        "revoked"
        if token.revoked_at is not None
        else ("expired" if token.expires_at <= now else "active")
    )
    return {
        "prefix": token.prefix,
        "app": token.app.name,
        "user_id": token.user_id,
        "session_id": token.bound_session_id,
        "label": token.label,
        "capabilities": list(token.capabilities),
        "state": state,
        "created_by_key": token.created_by_key,
        "created_at": token.created_at,
        "expires_at": token.expires_at,
        "last_used_at": token.last_used_at,
        "revoked_at": token.revoked_at,
        "revoked_reason": _REASONS.get(token.revoked_reason, "revoked")
        if token.revoked_at is not None
        else None,
    }
