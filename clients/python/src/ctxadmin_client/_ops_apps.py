"""The app, its keys and the provider prefix-cache registry."""

from __future__ import annotations

from typing import Any

from ._base import B, D, L, N, Runners
from ._calls import Call, body, path, query


class AppOperations(Runners[D, L, N, B]):
    # ------------------------------------------------------------------ the app and its keys
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
