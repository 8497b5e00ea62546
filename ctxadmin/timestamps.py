"""Timestamps as the API writes them."""

from __future__ import annotations

from datetime import UTC, datetime


def iso_timestamp(value: datetime) -> str:
    """ISO 8601 in UTC as PostgreSQL's ``to_json`` writes it (trailing zeros of the fraction
    dropped), so an event reads the same from the append response and from any later read."""
    text = value.astimezone(UTC).isoformat()
    if value.microsecond:
        head, _, tail = text.partition(".")
        fraction, zone = tail[:6], tail[6:]
        text = f"{head}.{fraction.rstrip('0')}{zone}"
    return text
