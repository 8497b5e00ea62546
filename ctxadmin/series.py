"""Hourly series, as the console's charts draw them."""

from __future__ import annotations

from datetime import datetime


def per_hour(hours: list[datetime], counts: dict[datetime, float]) -> list[float]:
    """``counts`` (by the start of an hour) as one value per hour of ``hours``, 0 where none."""
    return [counts.get(hour, 0) for hour in hours]
