"""The app, its keys and the provider prefix-cache registry."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ._base import B, D, L, N, Runners
from ._calls import Call, body, path, query, user_path


class AppOperations(Runners[D, L, N, B]):
    # ------------------------------------------------------------------ the app and its keys
    def whoami(self) -> D:
        """Who the credential is: its ``app``, ``credential`` kind, ``prefix``, ``scopes`` (a
        key's) or ``capabilities``, ``user_id`` and ``session_id`` (a token's)."""
        return self._one(Call("GET", "/api/v1/whoami"))

    def get_app(self, app: str) -> D:
        """The app's content-free summary (``diagnostics`` scope)."""
        return self._one(Call("GET", path(app) + "/"))

    def update_app(self, app: str, **fields: Any) -> D:
        """Change the app's settings (``display_name``; ``admin`` scope)."""
        return self._one(Call("PATCH", path(app) + "/", json=fields))

    def get_key(self, app: str) -> D:
        """The calling key's own metadata."""
        return self._one(Call("GET", path(app, "key")))

    def list_keys(self, app: str, *, limit: int | None = None) -> L:
        """The app's keys (metadata only), across pages (``admin`` scope)."""
        return self._many(Call("GET", path(app, "keys"), params=query(limit=limit)))

    def get_api_key(self, app: str, prefix: str) -> D:
        return self._one(Call("GET", path(app, "keys", prefix)))

    def create_api_key(self, app: str, scopes: list[str], *, name: str | None = None) -> D:
        """A new key of the app (``admin`` scope); its secret, ``key``, is in this answer only.
        Not retried: a repeat would make a second key."""
        return self._one(Call("POST", path(app, "keys"), json=body(scopes=list(scopes), name=name)))

    def rotate_api_key(self, app: str, prefix: str) -> D:
        """A new key with the old one's scopes and name; the old one is revoked at once. Not
        retried: a repeat would find the old key revoked."""
        return self._one(Call("POST", path(app, "keys", prefix, "rotate")))

    def revoke_api_key(self, app: str, prefix: str) -> N:
        return self._none(Call("DELETE", path(app, "keys", prefix)))

    # ------------------------------------------------------------------ user tokens
    def mint_user_token(
        self,
        app: str,
        user_id: str,
        *,
        capabilities: Sequence[str],
        session_id: str | None = None,
        ttl_ms: int | None = None,
        label: str | None = None,
    ) -> D:
        """A least-authority token for this user (and session), e.g. for an MCP client or one
        agent run; its ``token`` is shown once (``admin`` or ``delegate`` scope)."""
        return self._one(
            Call(
                "POST",
                user_path(app, user_id, "tokens"),
                json=body(
                    capabilities=list(capabilities),
                    session_id=session_id,
                    ttl_ms=ttl_ms,
                    label=label,
                ),
            )
        )

    def list_user_tokens(self, app: str, user_id: str, *, limit: int | None = None) -> L:
        """The user's tokens (metadata only), newest first, across pages."""
        return self._many(Call("GET", user_path(app, user_id, "tokens"), params=query(limit=limit)))

    def get_user_token(self, app: str, user_id: str, prefix: str) -> D:
        return self._one(Call("GET", user_path(app, user_id, "tokens", prefix)))

    def revoke_user_token(self, app: str, user_id: str, prefix: str) -> N:
        return self._none(Call("DELETE", user_path(app, user_id, "tokens", prefix)))

    def list_app_user_tokens(
        self,
        app: str,
        *,
        user_id: str | None = None,
        minted_by: str | None = None,
        state: str | None = None,
        limit: int | None = None,
    ) -> L:
        """The app's user tokens of every user (metadata only), newest first, across pages;
        narrowed by user, by the prefix of the key that minted them, and by ``state``
        (``active``, ``expired``, ``revoked``)."""
        params = query(user_id=user_id, minted_by=minted_by, state=state, limit=limit)
        return self._many(Call("GET", path(app, "user-tokens"), params=params))

    def revoke_user_tokens_minted_by(self, app: str, minted_by: str) -> D:
        """Revoke every open user token of the app that the key with prefix ``minted_by``
        minted: ``{"revoked": n}``."""
        return self._one(
            Call("POST", path(app, "user-tokens", "revoke"), json={"minted_by": minted_by})
        )

    # ------------------------------------------------------------------ prefix caches
    def acquire_cache(self, app: str, **request: Any) -> D:
        """A lease on the provider cache of a prefix (``scope``, ``prefix``, ``ttl_ms``,
        ``timeout_ms``): ``created``, ``hit`` or ``bypass`` with a reason."""
        return self._one(Call("POST", path(app, "cache", "acquire"), json=request))

    def cache_scope_status(self, app: str, fingerprint: str) -> D:
        return self._one(Call("GET", path(app, "cache", "scopes", fingerprint)))

    def invalidate_cache(self, app: str, **target: Any) -> D:
        """Invalidate one exact scope (``scope`` or ``scope_fingerprint``)."""
        return self._one(Call("POST", path(app, "cache", "invalidate"), json=target))
