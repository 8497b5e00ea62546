"""No duplicates, in layers (the rules themselves: ``memory.similarity``, ``memory.fillers``).

- **The same text is one memory.** An unkeyed add whose normalised text a live unkeyed
  entry of the scope holds already is that entry: answered with its id (200, not created),
  whatever its idempotency key, metadata or provenance (the first keeps its own). Adds of
  one text wait for each other on a transaction advisory lock of (scope, normalised hash),
  so two concurrent adds of it make one entry. A keyed add is a version of its key instead
  (``memory.facts``): the same text under another key is another fact. ``replace`` writes
  what it is given in place.
- **Near-duplicates.** Among the scope's unkeyed live entries, those that could be a
  near-duplicate by ``memory.similarity.near_words`` are found through the lexical index
  (``near_duplicate``: prefix filtering), and the first that is one is the entry the add
  nearly repeats. An explicit add is stored and queued in its own transaction
  (``memory_nearcheck``: its id); the beat's sweep flags the queued adds in batches, off
  the request path (``near_duplicate_of``: that entry's id; ``sweep_near_duplicates``,
  every ``CTXADMIN_MEMORY_NEAR_SWEEP_SECONDS``); ingestion merges it (skips it, reason
  ``near_duplicate``). Whatever the embedder: no vector.
- **No fact, no memory.** Ingestion skips session turns that carry no fact (reason
  ``no_fact``: ``memory.fillers``).
"""

from __future__ import annotations

import hashlib
import math

from django.conf import settings
from django.db import connection, transaction

from ctxadmin.models import App
from memory.facts import LIVE
from memory.search import tsquery_any
from memory.similarity import (
    MIN_NEAR_WORDS,
    NEAR_DUPLICATE_JACCARD,
    near_words,
    normalised_sha256,
    words,
)

# The most candidates read for a near-duplicate (those holding one of the add's rarest
# lexemes; in a large scope of common words there can be more, and any of them are read).
MAX_NEAR_CANDIDATES = 200

_NAMESPACE = "memory.same_text"


def _lock_keys(app: App, user_id: str, digests) -> list[int]:
    return sorted(
        {
            int.from_bytes(
                hashlib.sha256(f"{_NAMESPACE}:{app.pk}:{user_id}:{digest}".encode()).digest()[:8],
                "big",
                signed=True,
            )
            for digest in digests
        }
    )


def lock_texts(app: App, user_id: str, digests) -> None:
    """Transaction advisory locks on the scope's normalised texts ``digests``, in one order
    (two batches of the same texts never wait for each other in a circle)."""
    keys = _lock_keys(app, user_id, digests)
    if keys:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(pg_advisory_xact_lock(k)) FROM unnest(%s::bigint[]) AS k",
                [keys],
            )


_SAME_TEXTS = (
    f"SELECT DISTINCT ON (normalised_sha256) normalised_sha256, id::text "  # noqa: S608
    f"FROM memory_memoryentry WHERE app_id = %s AND user_id = %s AND key IS NULL "
    f"AND normalised_sha256 = ANY(%s) AND {LIVE} "
    "ORDER BY normalised_sha256, created_at, id"
)


def same_texts(app: App, user_id: str, digests) -> dict[str, str]:
    """``{normalised hash: id}`` of the scope's live unkeyed entries holding one of
    ``digests`` (the oldest, should an older database hold two)."""
    digests = sorted(set(digests))
    if not digests:
        return {}
    with connection.cursor() as cursor:
        cursor.execute(_SAME_TEXTS, [app.pk, user_id, digests])
        return dict(cursor.fetchall())


def locked_same_text(app: App, user_id: str, digest: str) -> str | None:
    """``lock_texts`` and then ``same_texts`` of one text, in one round trip (two statements:
    the second reads what committed before the lock was granted); the holder's id or None.
    In a transaction."""
    (key,) = _lock_keys(app, user_id, [digest])
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT pg_advisory_xact_lock(%s); {_SAME_TEXTS}",
            [key, app.pk, user_id, [digest]],
        )
        cursor.nextset()
        row = cursor.fetchone()
    return None if row is None else row[1]


def near_duplicate(
    app: App, user_id: str, content: str, older_than: str | None = None
) -> tuple[str, bool] | None:
    """The scope's live unkeyed entry holding ``content``'s normalised text (True), else the
    first that ``content`` nearly repeats (False); or None. ``older_than``: an entry's id, to
    compare it with the entries added before it only (or in its own transaction).

    Candidates by prefix filtering: a near-duplicate B of A shares at least
    ``NEAR_DUPLICATE_JACCARD`` of the union of their words, so it lacks at most
    m = ``floor((1 - NEAR_DUPLICATE_JACCARD) * |A|)`` of A's words, each taking at most one
    of A's lexemes with it; so B holds one of any m + 1 of A's lexemes. The entries holding
    one of the m + 1 rarest in the scope (its term statistics) are read through the lexical
    index with the exact text's hash, in one statement (at most ``MAX_NEAR_CANDIDATES``:
    complete below that), and the rule is applied to them. (Entries holding two of m + 2
    would be fewer, but the index answers an OR of lexemes several times faster than an OR
    of pairs.) A text of fewer than m + 1 lexemes (mostly stopwords) is compared by its
    exact text only."""
    mine = words(content)
    digest = normalised_sha256(content)
    rare: list[str] = []
    if len(mine) >= MIN_NEAR_WORDS:
        prefix = math.floor((1 - NEAR_DUPLICATE_JACCARD) * len(mine)) + 1
        with connection.cursor() as cursor:
            cursor.execute(
                """
                SELECT q.lexeme
                  FROM unnest(memory_search_vector(%s::regconfig, %s, true)) q
                  LEFT JOIN memory_termstats t
                    ON (t.app_id, t.user_id, t.lexeme) = (%s, %s, q.lexeme)
                 ORDER BY coalesce(t.entries, 0), q.lexeme
                 LIMIT %s
                """,
                [settings.CTXADMIN_MEMORY_TS_CONFIG, content, app.pk, user_id, prefix],
            )
            rare = [row[0] for row in cursor.fetchall()]
        if len(rare) < prefix:  # too few lexemes (stopwords) to bound the candidates
            rare = []
    lexical = "search @@ %s::tsquery" if rare else "false"
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT id::text, content, normalised_sha256 = %s FROM memory_memoryentry "  # noqa: S608
            f"WHERE app_id = %s AND user_id = %s AND key IS NULL AND {LIVE} "
            "AND (%s::uuid IS NULL OR (id <> %s::uuid AND created_at <= (SELECT o.created_at "
            f"FROM memory_memoryentry o WHERE o.id = %s::uuid))) "
            f"AND (normalised_sha256 = %s OR {lexical}) "
            "ORDER BY normalised_sha256 = %s DESC LIMIT %s",
            [
                digest,
                app.pk,
                user_id,
                older_than,
                older_than,
                older_than,
                digest,
                *([tsquery_any(rare)] if rare else []),
                digest,
                MAX_NEAR_CANDIDATES,
            ],
        )
        found = cursor.fetchall()
    for entry_id, text, same in found:
        if same:
            return entry_id, True
        if near_words(mine, words(text)):
            return entry_id, False
    return None


#: Entries one sweep transaction takes from the queue.
SWEEP_BATCH = 200


def sweep_near_duplicates(batch: int = SWEEP_BATCH) -> tuple[int, int]:
    """Take up to ``batch`` queued explicit adds (oldest first; rows another sweep holds are
    skipped) and flag those that nearly repeat an earlier entry of their scope, in one
    transaction: (entries taken, entries flagged). An entry erased since it was queued is
    dropped from the queue, nothing else."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "DELETE FROM memory_nearcheck WHERE id IN (SELECT id FROM memory_nearcheck "
            "ORDER BY id LIMIT %s FOR UPDATE SKIP LOCKED) RETURNING entry_id::text",
            [batch],
        )
        taken = [row[0] for row in cursor.fetchall()]
        flagged = flag_near_duplicates(taken) if taken else 0
    return len(taken), flagged


def flag_near_duplicates(entry_ids: list[str]) -> int:
    """Flag each of the unkeyed live entries ``entry_ids`` with the entry of its scope, added
    before it, that it nearly repeats (``near_duplicate_of``), unless flagged already; how
    many were flagged.
    Run by the near-duplicate sweep over the explicit adds queued (``sweep_near_duplicates``,
    the ``memory.sweep_near_duplicates`` task the beat runs), off the request path."""
    flagged = 0
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT id::text, app_id, user_id, content FROM memory_memoryentry "  # noqa: S608
            f"WHERE id = ANY(%s::uuid[]) AND key IS NULL AND near_duplicate_of_id IS NULL "
            f"AND {LIVE}",
            [list(entry_ids)],
        )
        rows = cursor.fetchall()
    apps = {app.pk: app for app in App.objects.filter(pk__in={row[1] for row in rows})}
    for entry_id, app_id, user_id, content in rows:
        found = near_duplicate(apps[app_id], user_id, content, older_than=entry_id)
        if found is None or found[1]:  # the same text: not a flag (the add answered it)
            continue
        with connection.cursor() as cursor:
            cursor.execute(
                "UPDATE memory_memoryentry SET near_duplicate_of_id = %s::uuid "
                "WHERE id = %s::uuid AND near_duplicate_of_id IS NULL",
                [found[0], entry_id],
            )
            flagged += cursor.rowcount
    return flagged
