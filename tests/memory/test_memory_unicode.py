"""Canonically equivalent text is the same text to search: content is indexed and embedded,
and every query read, in its NFC form, while the content is stored exactly as sent; and
entries written before that are indexed again by migration 0012."""

from __future__ import annotations

import importlib
import time

import pytest
from django.db import connection

from memory import vectors
from memory.embedders import HashingEmbedder, LocalEmbedder, embed_all
from tests.embedding_helpers import LOCAL_INSTALLED
from tests.memory.test_memory_api import add, search, url
from tests.memory.test_memory_lexical import assert_statistics_hold

COMPOSED = "Caf\u00e9"  # é as one code point
DECOMPOSED = "Cafe\u0301"  # e, then the combining acute accent
MIGRATION = importlib.import_module("memory.migrations.0012_unicode_and_cjk_lexemes")


@pytest.fixture
def api(owner):
    return owner.client()


def ids(hits) -> list[str]:
    return [hit["id"] for hit in hits["hits"]]


@pytest.mark.django_db
@pytest.mark.parametrize(("stored", "asked"), [(COMPOSED, DECOMPOSED), (DECOMPOSED, COMPOSED)])
@pytest.mark.parametrize("mode", ["lexical", "vector", "hybrid"])
def test_either_form_finds_the_other(api, stored, asked, mode):
    entry = add(api, content=f"Met Jon at the {stored} on Friday")
    add(api, content="The weather was rainy all week")
    hits = search(api, query=asked, mode=mode)
    assert ids(hits) == [entry["id"]]
    # Stored as sent, not normalised.
    assert api.get(f"{url()}/{entry['id']}").json()["content"] == entry["content"]
    assert stored in entry["content"]


@pytest.mark.parametrize(
    "embedder",
    [
        pytest.param(HashingEmbedder, id="hashing"),
        pytest.param(
            LocalEmbedder,
            id="local",
            marks=pytest.mark.skipif(not LOCAL_INSTALLED, reason="the local extra"),
        ),
    ],
)
def test_equivalent_texts_have_one_vector(embedder):
    made = embedder()
    first, second = embed_all(
        made,
        [f"{COMPOSED} au lait", f"{DECOMPOSED} au lait"],
        deadline=time.monotonic() + 30,
    )
    assert first == second


def _old_row(owner, content: str, embedded: bool) -> str:
    """An entry as rows were written before migration 0012: the lexical vector of the text
    as sent, the vector of the text as sent."""
    vector = HashingEmbedder(384).vector(content) if embedded else None
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO memory_memoryentry
                (id, app_id, user_id, content, content_sha256, metadata, search, embedding,
                 embedding_model, content_bytes, created_at, updated_at)
            VALUES (gen_random_uuid(), %s, 'alice', %s, md5(%s), '{}',
                    to_tsvector('english', %s), %s::vector, %s, octet_length(%s), now(), now())
            RETURNING id::text
            """,
            [
                owner.app.pk,
                content,
                content,
                content,
                None if vector is None else vectors.vector_text(vector),
                "hashing-v2-384" if embedded else "",
                content,
            ],
        )
        return cursor.fetchone()[0]


@pytest.mark.django_db
def test_the_migration_indexes_older_entries_again(api, owner):
    decomposed = _old_row(owner, f"Dinner at {DECOMPOSED} Rouge", embedded=True)
    japanese = _old_row(owner, "私の名前は太郎です", embedded=True)
    english = _old_row(owner, "Dinner at the diner", embedded=True)
    assert search(api, query=COMPOSED, mode="lexical")["hits"] == []
    assert search(api, query="太郎", mode="lexical")["hits"] == []
    with connection.cursor() as cursor:
        cursor.execute("SELECT id::text, search::text FROM memory_memoryentry")
        before = dict(cursor.fetchall())
    with connection.schema_editor() as editor:
        MIGRATION.recompute(None, editor)
    assert_statistics_hold()
    with connection.cursor() as cursor:
        cursor.execute("SELECT id::text, search::text, embedding IS NULL FROM memory_memoryentry")
        after = {row[0]: row[1:] for row in cursor.fetchall()}
    assert after[english] == (before[english], False)  # plain ASCII: nothing to redo
    assert after[japanese][1] is False  # already NFC: its vector stands
    assert after[decomposed][1] is True  # embedded from the text as sent: done again
    assert ids(search(api, query=COMPOSED, mode="lexical")) == [decomposed]
    assert ids(search(api, query="太郎", mode="lexical")) == [japanese]
    assert vectors.embed_pending_batch() == 1
    assert ids(search(api, query=COMPOSED, mode="vector"))[0] == decomposed
