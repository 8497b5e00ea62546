"""When to try a request again and how long to wait: a pure policy, shared by both clients.

Only idempotent requests are retried, on a transport failure or a 429, 502, 503 or 504
answer, at most ``max_retries`` times. The wait is the server's ``Retry-After`` when it gave
one (up to ``max_retry_after`` seconds; a longer one is not waited for, the error is
raised), else an exponential backoff with jitter: attempt *n* (0-based) waits a random time
between half and all of ``backoff * 2**n``, capped at ``max_backoff``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

RETRY_STATUSES = frozenset({429, 502, 503, 504})
IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE"})


@dataclass(frozen=True)
class RetryPolicy:
    max_retries: int = 3
    backoff: float = 0.5
    max_backoff: float = 30.0
    max_retry_after: float = 60.0
    rng: random.Random = field(default_factory=random.Random, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.max_retries < 0 or self.backoff < 0:
            raise ValueError("max_retries and backoff must not be negative")

    def delay(self, attempt: int, *, status: int | None, retry_after: float | None) -> float | None:
        """Seconds to wait before retry number ``attempt + 1`` (0-based ``attempt`` is the
        try that just failed), or None when it is not to be retried. ``status`` is None for
        a transport failure."""
        if attempt >= self.max_retries:
            return None
        if status is not None and status not in RETRY_STATUSES:
            return None
        if retry_after is not None:
            return retry_after if retry_after <= self.max_retry_after else None
        ceiling = min(self.max_backoff, self.backoff * float(2**attempt))
        return ceiling / 2 + self.rng.uniform(0, ceiling / 2)


def is_idempotent(method: str, declared: bool | None) -> bool:
    """A request may be repeated when it says so, else when its method is idempotent."""
    return declared if declared is not None else method.upper() in IDEMPOTENT_METHODS
