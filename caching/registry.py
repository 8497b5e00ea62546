"""The provider prefix-cache registry, as the other apps call it: acquire, resolve,
invalidate, status, cleanup (each defined in the module named for it).

Every web and worker process of a deployment shares one registry, kept in PostgreSQL:

- **Single flight** (``acquire``, ``creators``). A miss inserts the key's ``creating`` row (a
  partial unique index allows one ``creating``/``active`` row per key). The inserting caller
  is the creator; every other caller of the key, in any process or host, joins that row as a
  waiter (bounded per key) and is woken by ``NOTIFY`` or, failing that, by polling.
- **Deadlines are absolute.** Each waiter pushes the row's ``deadline`` to its own when it is
  later. The creator runs the provider call on a background thread and returns to its caller
  at the caller's deadline whatever happens; when the resource arrives, it is installed only
  if some waiter's deadline has not passed and the scope was not invalidated meanwhile,
  otherwise it is an orphan and is deleted. A creator that died leaves a ``creating`` row that
  ``cleanup`` resolves after its lease: any resource the provider made under the row's tag is
  found and deleted.
- **Leases are generation-checked** (``leases``, ``invalidate``). ``invalidate`` bumps the
  scope's generation, and TTL expiry retires the entry: older leases then resolve to
  ``lease_expired``. Only ``resolve`` (a server-side call) returns the provider's resource
  name.
- **Provider deletes** (invalidated, expired, orphaned, shut down) are rows in ``deleting``,
  worked off by the ``caching.cleanup`` beat task (``cleanup``) in bounded batches with
  per-call timeouts and retried with backoff.
"""

from __future__ import annotations

from caching.acquire import BYPASS_REASONS, Outcome, acquire
from caching.cleanup import cleanup
from caching.hits import flush_hits
from caching.inputs import (
    MAX_TIMEOUT_MS,
    AcquireRequest,
    limits,
    parse_acquire,
    parse_scope_body,
)
from caching.invalidate import invalidate, invalidate_all
from caching.leases import LeaseError, Resolved, resolve
from caching.status import pending_deletes, scope_status

__all__ = [
    "BYPASS_REASONS",
    "MAX_TIMEOUT_MS",
    "AcquireRequest",
    "LeaseError",
    "Outcome",
    "Resolved",
    "acquire",
    "cleanup",
    "flush_hits",
    "invalidate",
    "invalidate_all",
    "limits",
    "parse_acquire",
    "parse_scope_body",
    "pending_deletes",
    "resolve",
    "scope_status",
]
