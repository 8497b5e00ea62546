"""What other apps may read of the prefix-cache registry (the console): entries by state,
and the scopes of (app, user, model). Fingerprints and counts, never a prefix or a
provider's resource name."""

from __future__ import annotations

from django.db.models import Count, Sum

from caching.models import STATES, CacheEntry, CacheScope
from ctxadmin.models import App


def entries_by_state() -> dict:
    """Every app's entries by state, and the hits counted on them."""
    rows = CacheEntry.objects.values_list("state").annotate(n=Count("*"), hits=Sum("hits"))
    by_state = {state: 0 for state in STATES}
    hits = 0
    for state, n, state_hits in rows:
        by_state[state] = n
        hits += state_hits or 0
    return {"by_state": by_state, "hits_on_entries": hits}


def scope_fingerprints(app: App, user_id: str, model: str, limit: int) -> tuple[int, list[str]]:
    """How many scopes (app, user, ``model``) has, whatever their provider and policy, and
    the fingerprints of the newest ``limit``, newest first."""
    rows = CacheScope.objects.filter(app=app, user_id=user_id, model=model).order_by(
        "-created_at", "-id"
    )
    return rows.count(), list(rows.values_list("fingerprint", flat=True)[:limit])
