"""The provider prefix-cache registry over REST: acquire, a scope's status, invalidate.

Every endpoint needs the ``cache`` scope and sees only the key's app. Nothing here returns a
provider resource name or prefix text: a lease is opaque, and only the server-side
``caching.leases.resolve`` turns it into a resource.
"""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework.response import Response

from caching.acquire import acquire
from caching.inputs import parse_acquire, parse_scope_body
from caching.invalidate import invalidate
from caching.status import scope_status
from ctxadmin.api.schema import ref
from ctxadmin.api.views import AppScopedView
from ctxadmin.models import SCOPE_CACHE

JSON = "application/json"


class CacheScopedView(AppScopedView):
    required_scopes = {"*": SCOPE_CACHE}
    user_field = None


class CacheAcquireView(CacheScopedView):
    @extend_schema(
        operation_id="cache_acquire",
        description="A lease on the provider cache of `prefix` in `scope`: `created` (this "
        "call's create), `hit` (an existing entry, or one created by a concurrent caller it "
        "joined: `waited`), or `bypass` with a `reason` (`below_minimum`, `registry_full`, "
        "`deadline_exceeded`, `provider_error`, `too_many_waiters`); the caller then sends "
        "the whole request uncached. Answers by `timeout_ms` at the latest. 400 "
        "`sensitive_cache_scope` when the policy names a secret; 400 `ttl_exceeds_max`; 502 "
        "`cache_provider_error` when the create failed and the policy's `failure_mode` is "
        "`error`.",
        request={JSON: ref("CacheAcquire")},
        responses={200: ref("CacheAcquired")},
    )
    def post(self, request, app):
        parsed = parse_acquire(request.data, self.tenant)
        return Response(acquire(self.tenant, parsed).as_json())


class CacheInvalidateView(CacheScopedView):
    @extend_schema(
        operation_id="cache_invalidate",
        description="Invalidate one exact scope (by `scope` or `scope_fingerprint`), across "
        "its prefixes and TTLs: its generation is bumped so every earlier lease resolves to "
        "`lease_expired`, and the provider deletes of its entries are queued. 404 for a "
        "scope that never acquired.",
        request={JSON: ref("CacheScopeTarget")},
        responses={200: ref("CacheInvalidated")},
    )
    def post(self, request, app):
        target = parse_scope_body(request.data, self.tenant)
        return Response(invalidate(self.tenant, target))


class CacheScopeView(CacheScopedView):
    @extend_schema(
        operation_id="cache_scope_status",
        description="Content-free status of a scope: entry counts by state, waiters, "
        "expiries and its live entries' fingerprints.",
        responses={200: ref("CacheScopeStatus")},
    )
    def get(self, request, app, fingerprint):
        return Response(scope_status(self.tenant, fingerprint))
