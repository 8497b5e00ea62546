"""Delegated credentials: narrower credentials an app hands out (a tool token is one).

The ground knows them only by this interface, so its authentication and its base view serve
them without importing the app that mints them; that app registers how to resolve its format
(``register_delegated_credential``) when Django starts.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ctxadmin.models import App


class DelegatedCredential:
    """What the API's base view needs of a delegated credential (a model mixes this in):
    its ``app``, its ``prefix``, the user and session it is bound to, and its capabilities.
    It reaches only that user and session, and only endpoints asking for a capability it
    carries."""

    #: The credential's kind, in ``request.user``'s name ("tooltoken:<prefix>").
    credential_kind = "delegated"
    app: App
    prefix: str
    capabilities: list[str]

    @property
    def bound_user_id(self) -> str:
        raise NotImplementedError

    @property
    def bound_session_id(self) -> str | None:
        """None: not bound to one session (any session of its user)."""
        raise NotImplementedError


class CredentialEnded(Exception):
    """Raised by a resolver for a credential that is genuine (its secret matches) but no
    longer works: it expired, was revoked or its purpose ended. ``message`` says which kind
    of credential it is and why it stopped (never the credential itself); ``reason`` is a
    stable word (``expired``, ``revoked``, ``answered``, ``purged``)."""

    def __init__(self, message: str, *, kind: str, reason: str, ended_at: str) -> None:
        super().__init__(message)
        self.message = message
        self.kind = kind
        self.reason = reason
        self.ended_at = ended_at


#: Credential format marker (e.g. ``"ctt_"``) -> how to resolve a raw credential to a live
#: one (None: unknown or wrong; ``CredentialEnded`` raised: genuine but ended).
_DELEGATED: dict[str, Callable[[str], DelegatedCredential | None]] = {}


def register_delegated_credential(
    marker: str, resolve: Callable[[str], DelegatedCredential | None]
) -> None:
    """Credentials starting with ``marker`` are resolved by ``resolve`` (an app's ``ready``)."""
    _DELEGATED[marker] = resolve


def resolvers() -> list[tuple[str, Callable[[str], DelegatedCredential | None]]]:
    return list(_DELEGATED.items())


#: ``[key prefix] -> how many ended``: ends the delegated credentials the keys minted. Called
#: in the transaction that revokes the keys (revocation and rotation), after their UPDATE.
_MINTER_ENDERS: list[Callable[[list[str]], int]] = []


def register_minter_ender(end: Callable[[list[str]], int]) -> None:
    """Credentials minted by an API key end when the key is revoked (an app's ``ready``)."""
    if end not in _MINTER_ENDERS:
        _MINTER_ENDERS.append(end)


def end_minted_by(prefixes: list[str]) -> int:
    return sum(int(end(prefixes)) for end in _MINTER_ENDERS) if prefixes else 0
