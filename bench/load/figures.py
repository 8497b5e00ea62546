"""Figures of a run's calls: percentiles, the per-endpoint table, errors by kind."""

from __future__ import annotations

import statistics
from collections import Counter

from bench.load.client import Call
from bench.load.plan import ENDPOINTS


def percentiles(samples: list[float]) -> dict[str, float]:
    if len(samples) < 2:
        value = round(samples[0], 2) if samples else None
        return {"p50": value, "p95": value, "p99": value}
    cuts = statistics.quantiles(samples, n=100, method="inclusive")
    return {"p50": round(cuts[49], 2), "p95": round(cuts[94], 2), "p99": round(cuts[98], 2)}


def endpoint_table(calls: list[Call], seconds: float) -> dict:
    table = {}
    for endpoint in ENDPOINTS:
        mine = [c for c in calls if c.endpoint == endpoint]
        if not mine:
            continue
        ok = [(c.end - c.start) * 1000 for c in mine if c.ok]
        table[endpoint] = {
            "requests": len(mine),
            "per_second": round(len(mine) / seconds, 1),
            "errors": len(mine) - len(ok),
            **percentiles(ok),
        }
    return table


def errors_by_kind(calls: list[Call]) -> dict[str, int]:
    return dict(Counter(c.outcome for c in calls if not c.ok).most_common())
