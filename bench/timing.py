"""Timing a call and summarising samples as percentiles (milliseconds)."""

from __future__ import annotations

import statistics
import time


def percentiles(samples: list[float]) -> dict[str, float]:
    cuts = statistics.quantiles(samples, n=100, method="inclusive")
    return {"p50": round(cuts[49], 2), "p95": round(cuts[94], 2)}


def timed_ms(call, reps: int, warmup: int = 2) -> dict[str, float]:
    for _ in range(warmup):
        call()
    samples = []
    for _ in range(reps):
        started = time.perf_counter()
        call()
        samples.append((time.perf_counter() - started) * 1000)
    return percentiles(samples)
