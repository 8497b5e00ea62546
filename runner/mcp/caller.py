"""Who is calling ``/mcp``: an API key (its scopes decide the tools) or a delegated
credential (its capabilities decide them, bound to its user and session)."""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

from django.http.request import HttpHeaders
from rest_framework import exceptions

from ctxadmin.auth import ApiKeyAuthentication, TokenEnded
from ctxadmin.delegated import DelegatedCredential
from ctxadmin.models import ApiKey, App
from sessions_app.state import FULL_REACH, StateReach, delegated_reach

#: The WSGI environ key the authenticated caller travels under to the tool handlers.
ENVIRON_KEY = "ctxadmin.mcp.caller"


@dataclass(frozen=True)
class Caller:
    app: App
    prefix: str
    kind: str  # apikey | tooltoken | usertoken
    scopes: frozenset[str] = frozenset()
    capabilities: frozenset[str] | None = None  # None: an API key
    user_id: str | None = None  # a delegated credential's own user
    session_id: str | None = None  # ... and session, when it names one

    @property
    def delegated(self) -> bool:
        return self.capabilities is not None

    @property
    def state_reach(self) -> StateReach:
        """The shared state scopes this caller's appends may write (see ``StateReach``)."""
        return delegated_reach(self.session_id) if self.delegated else FULL_REACH

    def may(self, scope: str, capability: str | None) -> bool:
        if self.capabilities is None:
            return scope in self.scopes
        return capability is not None and capability in self.capabilities


def authenticate(environ: dict) -> Caller | None:
    """The caller of a request by its ``Authorization`` header, with exactly the REST API's
    code (``ctxadmin.auth``); None for a missing, unknown, wrong or revoked one. A genuine
    token that ended raises ``TokenEnded``, whose message says why."""
    request = SimpleNamespace(META=environ, headers=HttpHeaders(environ))
    try:
        found = ApiKeyAuthentication().authenticate(request)
    except TokenEnded:
        raise
    except exceptions.AuthenticationFailed:
        return None
    if found is None:
        return None
    _principal, credential = found
    if isinstance(credential, ApiKey):
        return Caller(credential.app, credential.prefix, "apikey", frozenset(credential.scopes))
    assert isinstance(credential, DelegatedCredential)
    return Caller(
        credential.app,
        credential.prefix,
        credential.credential_kind,
        capabilities=frozenset(credential.capabilities),
        user_id=credential.bound_user_id,
        session_id=credential.bound_session_id,
    )
