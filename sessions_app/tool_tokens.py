"""Least-authority tool tokens: minted by the app for one function call of an invocation.

A token reads ``ctt_<prefix>_<secret>`` (shown once; its SHA-256 digest is stored). It is
bound to (app, user, session, invocation, function call), carries ``identity`` and the
capabilities asked for (only those whose scope the minting key holds), and stops working
when it expires, on ``DELETE``, when the function response of its call is stored, when a
``purge`` compaction deletes its call, when a rewind (``rewind_before_invocation_id``) undoes
its call, when its user is erased, or when the API key that minted it is revoked or rotated.
Each of these ends is written on the token's row as it happens (the append that stores the answer
ends the call's tokens in its own statement), so an end never depends on events that can
later disappear, and nothing that ended starts again.
"""

from __future__ import annotations

import re
import secrets
import string
from datetime import UTC, timedelta
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from ctxadmin.delegated import CredentialEnded
from ctxadmin.erasure import lock_user
from ctxadmin.errors import ServiceError, invalid, not_found, strict_object
from ctxadmin.keys import digest_matches, hash_key
from ctxadmin.models import SCOPE_MEMORY, SCOPE_SESSIONS, ApiKey, App
from ctxadmin.pruning import echoed
from ctxadmin.services import hold_minting_key
from sessions_app.models import Event, Invocation, Session, ToolToken

TOKEN_PREFIX = "ctt_"  # noqa: S105 - the format marker, not a secret
_TOKEN_RE = re.compile(r"^ctt_([a-z0-9]{10})_([A-Za-z0-9_-]{43})\Z")
MINT_KEYS = frozenset({"tool_name", "capabilities", "ttl_ms", "function_call_id"})
DEFAULT_TTL_MS = 300_000
MAX_TTL_MS = 3_600_000
# Open tokens of one invocation: a model's calls are bounded, so is what may act for them.
MAX_OPEN_PER_INVOCATION = 64


#: The API key scope each capability needs: a token carries only capabilities whose scope
#: the key that mints it holds (``identity`` needs none).
CAPABILITY_SCOPES = {
    "identity": None,
    "state_read": SCOPE_SESSIONS,
    "artifact_put": SCOPE_SESSIONS,
    "artifact_get": SCOPE_SESSIONS,
    "artifact_list": SCOPE_SESSIONS,
    "artifact_list_versions": SCOPE_SESSIONS,
    "artifact_delete": SCOPE_SESSIONS,
    "artifact_attach": SCOPE_SESSIONS,
    "memory_search": SCOPE_MEMORY,
    "memory_add": SCOPE_MEMORY,
    "memory_delete": SCOPE_MEMORY,
    "memory_get": SCOPE_MEMORY,
    "context_build": SCOPE_SESSIONS,
    "session_read": SCOPE_SESSIONS,
    "event_append": SCOPE_SESSIONS,
}


def check_minter_holds(capabilities: list[str], minter: ApiKey) -> None:
    """Refuse (403 ``capability_beyond_minter``) a capability whose scope the minting key
    lacks: a key hands out no more than it holds."""
    for capability in sorted(set(capabilities)):
        scope = CAPABILITY_SCOPES[capability]
        if scope is not None and not minter.has_scope(scope):
            raise ServiceError(
                "capability_beyond_minter",
                f"The capability '{capability}' needs the '{scope}' scope, which the API key "
                "minting this token does not have.",
                status_code=403,
                details={"field": "capabilities", "capability": capability, "scope": scope},
            )


def hold_minter(minter: ApiKey) -> None:
    """In the mint's transaction: the minting key's row, held against its revocation (which
    ends what it minted); 401 when it was revoked since the request began."""
    if not hold_minting_key(minter):
        raise ServiceError("authentication_failed", "Invalid API key.", status_code=401)


def parse_token(raw: str) -> str | None:
    match = _TOKEN_RE.match(raw)
    return match.group(1) if match else None


def _generate() -> tuple[str, str]:
    alphabet = string.ascii_lowercase + string.digits
    prefix = "".join(secrets.choice(alphabet) for _ in range(10))
    return prefix, f"{TOKEN_PREFIX}{prefix}_{secrets.token_urlsafe(32)}"


def _model_calls(session: Session, invocation: Invocation) -> list[tuple[dict, int]]:
    """The function calls the model made in the invocation, with the seq of their event."""
    calls = []
    for content, seq in Event.objects.filter(
        session=session, event_id__in=invocation.output_event_ids
    ).values_list("content", "seq"):
        for part in (content or {}).get("parts", []):
            if "function_call" in part:
                calls.append((part["function_call"], seq))
    return calls


def mint(
    app: App, session: Session, invocation_id: str, body: Any, minter: ApiKey
) -> tuple[ToolToken, str]:
    """A token for a function call the model made in this invocation (the tool's name, and
    the call's id when the model called it more than once), with no capability whose scope
    ``minter`` lacks; it ends with ``minter``."""
    body = strict_object(body, MINT_KEYS)
    tool_name = body.get("tool_name")
    if not isinstance(tool_name, str) or not tool_name:
        raise invalid("tool_name", "is required")
    capabilities = body.get("capabilities", [])
    if not isinstance(capabilities, list) or not all(isinstance(c, str) for c in capabilities):
        raise invalid("capabilities", "must be a list of capability names")
    unknown = sorted(set(capabilities) - set(ToolToken.CAPABILITIES))
    if unknown:
        raise invalid("capabilities", f"unknown capability {echoed(unknown[0])!r}")
    check_minter_holds(capabilities, minter)
    ttl_ms = body.get("ttl_ms", DEFAULT_TTL_MS)
    if isinstance(ttl_ms, bool) or not isinstance(ttl_ms, int) or not 1000 <= ttl_ms <= MAX_TTL_MS:
        raise invalid("ttl_ms", f"must be an integer from 1000 to {MAX_TTL_MS}")
    invocation = Invocation.objects.filter(session=session, invocation_id=invocation_id).first()
    if invocation is None or invocation.status != Invocation.COMPLETED:
        raise not_found()
    calls = [(c, seq) for c, seq in _model_calls(session, invocation) if c.get("name") == tool_name]
    wanted = body.get("function_call_id")
    if wanted is not None:
        calls = [(c, seq) for c, seq in calls if c.get("id") == wanted]
    if not calls:
        raise ServiceError(
            "no_such_function_call",
            "The model made no such function call in this invocation.",
            status_code=422,
            details={"field": "function_call_id" if wanted is not None else "tool_name"},
        )
    call, call_seq = calls[0]
    with transaction.atomic():
        # The session row is what every append locks: holding it, no answer can be stored
        # between the check below and the token's insert (an append that answers the call
        # ends the call's tokens, but only those committed before it).
        Session.objects.select_for_update().filter(pk=session.pk).values_list("pk").get()
        lock_user(app, session.user_id, shared=True)  # the user's erasure revokes it
        hold_minter(minter)  # and so does its key's revocation
        if answered(session.pk, call["id"], call_seq):
            raise ServiceError(
                "function_call_answered",
                "The function response of this call is already stored.",
                status_code=409,
            )
        open_tokens = ToolToken.objects.filter(
            invocation=invocation, revoked_at__isnull=True, expires_at__gt=timezone.now()
        ).count()
        if open_tokens >= MAX_OPEN_PER_INVOCATION:
            raise ServiceError(
                "too_many_tool_tokens",
                f"An invocation holds at most {MAX_OPEN_PER_INVOCATION} open tool tokens.",
                status_code=429,
            )
        prefix, raw = _generate()
        token = ToolToken.objects.create(
            app=app,
            user_id=session.user_id,
            session=session,
            invocation=invocation,
            function_call_id=call["id"],
            call_seq=call_seq,
            tool_name=tool_name,
            created_by_key=minter.prefix,
            capabilities=sorted({"identity", *capabilities}),
            prefix=prefix,
            token_hash=hash_key(raw),
            expires_at=timezone.now() + timedelta(milliseconds=ttl_ms),
        )
    return token, raw


def answered(session_pk: int, call_id: str, call_seq: int) -> bool:
    """Whether the call's function response is in the session (it can only follow the call,
    so only the events after it are read, through the (session, seq) index). Minting asks
    this with the session locked; a token's use reads only the token's own row."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT 1 FROM sessions_app_event WHERE session_id = %s AND seq > %s "
            "AND response_ids && %s LIMIT 1",
            [session_pk, call_seq, [call_id]],
        )
        return cursor.fetchone() is not None


def revoke(app: App, session: Session, invocation_id: str, prefix: str) -> None:
    changed = ToolToken.objects.filter(
        app=app,
        session=session,
        invocation__invocation_id=invocation_id,
        prefix=prefix,
        revoked_at__isnull=True,
    ).update(revoked_at=timezone.now(), revoked_reason="deleted")
    if (
        not changed
        and not ToolToken.objects.filter(
            app=app, session=session, invocation__invocation_id=invocation_id, prefix=prefix
        ).exists()
    ):
        raise not_found()


def end_minted_by(prefixes: list[str]) -> int:
    """End the open tokens the keys minted (their revocation, in its transaction)."""
    return ToolToken.objects.filter(created_by_key__in=prefixes, revoked_at__isnull=True).update(
        revoked_at=timezone.now(), revoked_reason="minter_revoked"
    )


def authenticate(raw: str) -> ToolToken | None:
    """The live token for ``raw`` (with its app and session); None for an unknown or wrong
    one; ``CredentialEnded`` for a genuine one that no longer works, saying why."""
    prefix = parse_token(raw)
    if prefix is None:
        return None
    token = ToolToken.objects.select_related("app", "session").filter(prefix=prefix).first()
    if token is None or not digest_matches(raw, token.token_hash):
        return None
    if token.revoked_at is not None or token.expires_at <= timezone.now():
        raise ended(token)
    ToolToken.objects.filter(pk=token.pk).update(last_used_at=timezone.now())
    return token


def _when(value) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def ended(token: ToolToken) -> CredentialEnded:
    """Why a genuine token no longer works, in words that name the kind of token (the
    token itself is never quoted)."""
    kind = "tool token" if token.invocation_id is not None else "user token"
    if token.revoked_at is None:
        at = _when(token.expires_at)
        return CredentialEnded(
            f"This {kind} expired at {at}; ask the app for a new one.",
            kind=kind.replace(" ", "_"),
            reason="expired",
            ended_at=at,
        )
    at = _when(token.revoked_at)
    reason = token.revoked_reason or "deleted"
    message = {
        "answered": f"This {kind} no longer works: its invocation ended at {at}, when the "
        "function response of its call was stored.",
        "purged": f"This {kind} no longer works: its invocation ended at {at}, when a "
        "compaction purged its function call.",
        "rewound": f"This {kind} no longer works: its invocation ended at {at}, when the "
        "session was rewound before its call.",
        "erased": f"This {kind} no longer works: its user was erased at {at}.",
        "minter_revoked": f"This {kind} no longer works: the API key that minted it was "
        f"revoked at {at}.",
    }.get(reason, f"This {kind} was revoked at {at}.")
    return CredentialEnded(
        message,
        kind=kind.replace(" ", "_"),
        reason="revoked" if reason == "deleted" else reason,
        ended_at=at,
    )


def token_json(token: ToolToken) -> dict:
    return {
        "prefix": token.prefix,
        "app": token.app.name,
        "user_id": token.user_id,
        "session_id": token.bound_session_id,
        "invocation_id": token.invocation.invocation_id,
        "function_call_id": token.function_call_id,
        "tool_name": token.tool_name,
        "capabilities": list(token.capabilities),
        "created_at": token.created_at,
        "expires_at": token.expires_at,
        "revoked_at": token.revoked_at,
    }
