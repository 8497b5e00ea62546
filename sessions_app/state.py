"""State scopes with ADK semantics (pure; no Django import).

``app:key`` is shared by every session of the app, ``user:key`` by every session of one
user, a plain ``key`` belongs to the session, and ``temp:key`` lives only in the response of
the append that carries it. App and user state are stored without their prefix and merged,
re-prefixed, on read. A delta's null is a stored null (as in ADK); a key is removed only by
an append's ``state_remove``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

APP_PREFIX = "app:"
USER_PREFIX = "user:"
TEMP_PREFIX = "temp:"


@dataclass
class ScopedDelta:
    app: dict[str, Any] = field(default_factory=dict)
    user: dict[str, Any] = field(default_factory=dict)
    session: dict[str, Any] = field(default_factory=dict)
    temp: dict[str, Any] = field(default_factory=dict)


def split_delta(delta: dict[str, Any]) -> ScopedDelta:
    scoped = ScopedDelta()
    for key, value in delta.items():
        if key.startswith(APP_PREFIX):
            scoped.app[key[len(APP_PREFIX) :]] = value
        elif key.startswith(USER_PREFIX):
            scoped.user[key[len(USER_PREFIX) :]] = value
        elif key.startswith(TEMP_PREFIX):
            scoped.temp[key] = value
        else:
            scoped.session[key] = value
    return scoped


@dataclass(frozen=True)
class StateReach:
    """Which shared scopes a writer may write. An API key reaches both; a delegated
    credential (a user or tool token) never writes ``app:`` state, which every other user's
    sessions read, and one bound to a session never writes ``user:`` state, which the user's
    other sessions read."""

    app: bool = True
    user: bool = True


FULL_REACH = StateReach()


def delegated_reach(bound_session_id: str | None) -> StateReach:
    return StateReach(app=False, user=bound_session_id is None)


def out_of_reach(delta: dict[str, Any], reach: StateReach) -> tuple[str, str] | None:
    """The first key of ``delta`` (in sorted order) in a scope ``reach`` does not cover, with
    that scope's name; None when every key is within reach."""
    for key in sorted(delta):
        if not reach.app and key.startswith(APP_PREFIX):
            return key, "app"
        if not reach.user and key.startswith(USER_PREFIX):
            return key, "user"
    return None


def split_keys(keys: list[str]) -> ScopedDelta:
    """Keys to remove, by scope (un-prefixed for ``app:`` and ``user:``), as a delta whose
    values are unused."""
    return split_delta(dict.fromkeys(keys))


def without_keys(state: dict[str, Any], keys: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in state.items() if key not in keys}


def without_temp(delta: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in delta.items() if not key.startswith(TEMP_PREFIX)}


def merged(
    session_state: dict[str, Any], app_state: dict[str, Any], user_state: dict[str, Any]
) -> dict[str, Any]:
    """The state a session sees: its own keys plus re-prefixed app and user keys."""
    result = dict(session_state)
    result.update({APP_PREFIX + key: value for key, value in app_state.items()})
    result.update({USER_PREFIX + key: value for key, value in user_state.items()})
    return result


def prefixed(prefix: str, state: dict[str, Any]) -> dict[str, Any]:
    return {prefix + key: value for key, value in state.items()}
