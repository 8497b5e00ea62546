"""Bounded batch loops for periodic work."""

from __future__ import annotations

from collections.abc import Callable


def in_batches(run_batch: Callable[[], int], batch_size: int, max_batches: int) -> int:
    """Call ``run_batch`` (which returns how many rows it handled) until a batch comes back
    short of ``batch_size`` or ``max_batches`` ran; the rows handled in all. What is left
    waits for the next run of the beat."""
    total = 0
    for _ in range(max_batches):
        done = run_batch()
        total += done
        if done < batch_size:
            break
    return total
