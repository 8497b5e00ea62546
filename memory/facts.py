"""Facts over time: a memory's key, where a new version of a key goes in that key's
valid-time history, and which versions a reader at (``as_of``, ``known_at``) sees.

Pure: no Django, no database; a refusal is ``ctxadmin.errors.invalid``.

A key's versions tile valid time: each is valid from its ``valid_from`` up to its
``valid_to`` (the next version's ``valid_from``; none for the live version). A new version
goes where its ``valid_from`` falls: the version it falls inside is cut short at it, and it
is valid up to where that one was (the next version's ``valid_from``, or open when that one
was the live one). So a newer fact supersedes the live version, and an older fact that
arrives later takes its place in the history without touching the live one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ctxadmin.errors import invalid

MAX_FACT_KEY_LENGTH = 128
# Dot-separated segments of lower-case letters, digits, '_' and '-' (``preference.seat``).
FACT_KEY_SEGMENT = "[a-z0-9_-]+"
FACT_KEY = re.compile(rf"^{FACT_KEY_SEGMENT}(?:\.{FACT_KEY_SEGMENT})*\Z")
FACT_KEY_RULE = (
    f"must be 1-{MAX_FACT_KEY_LENGTH} characters: dot-separated segments of "
    "a-z 0-9 _ - (case-folded), e.g. preference.seat"
)


def parse_fact_key(value: Any, path: str = "key") -> str | None:
    """A memory's ``key``: null, or 1-128 characters of dot-separated segments of
    ``[a-z0-9_-]`` once case-folded (``Preference.Seat`` is ``preference.seat``; ASCII
    only, so folding never makes a key of something else)."""
    if value is None:
        return None
    if not isinstance(value, str) or not value.isascii():
        raise invalid(path, FACT_KEY_RULE)
    folded = value.lower()
    if not 1 <= len(folded) <= MAX_FACT_KEY_LENGTH or not FACT_KEY.match(folded):
        raise invalid(path, FACT_KEY_RULE)
    return folded


@dataclass(frozen=True)
class Version:
    """One stored version of a key, as placement sees it."""

    id: str
    valid_from: datetime
    valid_to: datetime | None
    # The version that cut this one short (its ``valid_to`` is that one's ``valid_from``).
    superseded_by: str | None = None


@dataclass(frozen=True)
class Placement:
    """Where a new version goes: its own ``valid_to`` and successor (``superseded_by``),
    and the version it cuts short (``closes``: that one's ``valid_to`` becomes the new
    version's ``valid_from`` and its successor the new version), if any."""

    valid_to: datetime | None
    superseded_by: str | None
    closes: str | None


def place(versions: list[Version], valid_from: datetime) -> Placement:
    """Where a version valid from ``valid_from`` goes among a key's ``versions`` (any
    order). It falls inside the version with ``valid_from <= it < valid_to`` (the latest
    such when versions share a start): that one is closed at it, and the new one takes
    its old end and successor. Outside every version (before the first, or in a gap a
    deleted version left), it ends where the next version starts, or is open after the
    last."""
    ordered = sorted(versions, key=lambda v: (v.valid_from, v.valid_to is None, v.valid_to))
    inside = None
    for version in ordered:
        if version.valid_from <= valid_from and (
            version.valid_to is None or valid_from < version.valid_to
        ):
            inside = version
    if inside is not None:
        return Placement(inside.valid_to, inside.superseded_by, inside.id)
    later = [v for v in ordered if v.valid_from > valid_from]
    if later:
        return Placement(later[0].valid_from, later[0].id, None)
    return Placement(None, None, None)


def end_as_known(
    valid_to: datetime | None,
    earlier_ends: list[tuple[datetime, datetime]] | tuple = (),
    *,
    known_at: datetime,
) -> datetime | None:
    """A closed version's end as known at ``known_at``: its ``valid_to``, unless an older
    fact placed inside it since then cut it short; ``earlier_ends`` holds, oldest first,
    each end it had before such a cut and ``until`` when that end held (the cut's record
    time)."""
    for end, until in earlier_ends:
        if until > known_at:
            return end
    return valid_to


def visible(
    *,
    valid_from: datetime,
    valid_to: datetime | None,
    recorded_at: datetime,
    retired_at: datetime | None,
    as_of: datetime,
    known_at: datetime,
    earlier_ends: list[tuple[datetime, datetime]] | tuple = (),
) -> bool:
    """Whether a version is what a reader at valid time ``as_of`` and record time
    ``known_at`` sees: recorded by ``known_at``, valid from ``as_of`` or before, and not
    yet ended at ``as_of`` as known at ``known_at`` (a version closed after ``known_at``
    was, then, still open; one cut short after ``known_at`` ended, then, where it ended
    before the cut: ``end_as_known``). ``VISIBLE_SQL`` is the same predicate for the
    database."""
    if recorded_at > known_at or valid_from > as_of:
        return False
    if valid_to is None or retired_at is None or retired_at > known_at:
        return True
    return end_as_known(valid_to, earlier_ends, known_at=known_at) > as_of


# A live entry: not past its ``expires_at`` (an expired entry vanishes at once from every
# read; the purge task deletes it later).
LIVE = "(expires_at IS NULL OR expires_at > now())"

# ``visible`` over a memory row, for a reader at (as_of, known_at), each NULL for now. Now is
# the reading statement's time (not its transaction's): a row written earlier in the same
# transaction is seen. ``earlier_ends`` is a JSON array of {"valid_to", "until"}, oldest
# first (NULL for almost every row: only a closed version an older fact cut short has one).
_NOW = "statement_timestamp()"
_AS_OF = f"coalesce(%s::timestamptz, {_NOW})"
_KNOWN_AT = f"coalesce(%s::timestamptz, {_NOW})"
_VISIBLE_SQL = (
    f"(valid_from <= {_AS_OF}"  # noqa: S608 - constant clauses
    f" AND (valid_to IS NULL OR retired_at IS NULL OR retired_at > {_KNOWN_AT}"
    " OR CASE WHEN earlier_ends IS NULL THEN valid_to ELSE coalesce("
    "(SELECT (e.value->>'valid_to')::timestamptz FROM jsonb_array_elements(earlier_ends)"
    f" WITH ORDINALITY AS e(value, n) WHERE (e.value->>'until')::timestamptz > {_KNOWN_AT}"
    f" ORDER BY e.n LIMIT 1), valid_to) END > {_AS_OF})"
    f" AND recorded_at <= {_KNOWN_AT})"
)
# The default reader (valid now, as known now): the versions open now.
CURRENT_SQL = f"(valid_from <= {_NOW} AND (valid_to IS NULL OR valid_to > {_NOW}))"
# Cutting a version short at a new version's ``valid_from`` (parameters: that, the new
# version's id, the version's id): a version already closed keeps the end it had, and
# until when, in ``earlier_ends``; ``retired_at`` stays the first closing's.
CUT_SHORT_SQL = (
    "UPDATE memory_memoryentry SET valid_to = %s, superseded_by_id = %s, "
    "earlier_ends = CASE WHEN retired_at IS NULL THEN earlier_ends ELSE "
    "coalesce(earlier_ends, '[]'::jsonb) || jsonb_build_array(jsonb_build_object("
    "'valid_to', valid_to, 'until', now())) END, "
    "retired_at = coalesce(retired_at, now()), updated_at = now() WHERE id = %s"
)


def validity_sql(as_of: datetime | None, known_at: datetime | None) -> tuple[str, list]:
    """A condition on a memory row (its own columns only) and its parameters: ``visible``
    for a reader at ``as_of`` and ``known_at`` (None: now)."""
    if as_of is None and known_at is None:
        return CURRENT_SQL, []
    return _VISIBLE_SQL, [as_of, known_at, known_at, as_of, known_at]


MAX_INSTANT_LENGTH = 64


def parse_instant(value: Any, path: str) -> datetime | None:
    """An instant (``valid_from``, ``as_of``, ``known_at``): null, or an ISO 8601 date and
    time with a zone (``2026-06-01T09:00:00Z``), at most 64 characters."""
    if value is None:
        return None
    rule = "must be an ISO 8601 date and time with a time zone, e.g. 2026-06-01T09:00:00Z"
    if not isinstance(value, str) or len(value) > MAX_INSTANT_LENGTH:
        raise invalid(path, rule)
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise invalid(path, rule) from None
    if parsed.tzinfo is None:
        raise invalid(path, rule)
    return parsed.astimezone(UTC)
