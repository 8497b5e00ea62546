"""Lexical memory search: BM25 with each scope's own statistics, and the statistics the
database keeps for it through every way entries are added and removed."""

from __future__ import annotations

import hashlib
import io
import logging
import random
import threading

import pytest
from django.db import connection, connections

from memory import fusion, inputs
from memory import search as memory_search
from memory.models import MemoryEntry
from tests.conftest import make_tenant
from tests.memory.test_memory_api import add, search, url


def recomputed() -> tuple[set, set]:
    """The statistics as they follow from the entries now, and as the triggers kept them."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT app_id, user_id, count(*), sum(length(search)) FROM memory_memoryentry "
            "GROUP BY 1, 2"
        )
        scopes = set(cursor.fetchall())
        cursor.execute("SELECT app_id, user_id, entries, lexemes FROM memory_scopestats")
        kept_scopes = set(cursor.fetchall())
        cursor.execute(
            "SELECT m.app_id, m.user_id, u.lexeme, count(*) FROM memory_memoryentry m, "
            "unnest(m.search) u GROUP BY 1, 2, 3"
        )
        terms = set(cursor.fetchall())
        cursor.execute("SELECT app_id, user_id, lexeme, entries FROM memory_termstats")
        kept_terms = set(cursor.fetchall())
    return (scopes, terms), (kept_scopes, kept_terms)


def assert_statistics_hold():
    expected, kept = recomputed()
    assert kept == expected


@pytest.fixture
def api(owner):
    return owner.client()


def ids(hits) -> list[str]:
    return [hit["id"] for hit in hits["hits"]]


@pytest.mark.django_db
class TestRanking:
    def test_a_rare_word_outweighs_a_common_one(self, api):
        common = [add(api, content=f"Caroline talked about her day, part {n}.") for n in range(8)]
        rare = add(api, content="Caroline mentioned the pottery class.")
        hits = search(api, query="What did Caroline say about pottery?", mode="lexical")
        assert ids(hits)[0] == rare["id"]
        assert hits["hits"][0]["score_type"] == "bm25"
        # Every entry holding a query word is found; the common word still ranks them.
        assert set(ids(hits)) == {rare["id"], *(entry["id"] for entry in common)}
        assert hits["hits"][0]["score"] > hits["hits"][1]["score"] > 0

    def test_document_frequency_is_the_scope_s_own(self, api):
        """Bob's many "garden" entries make the word common for Bob, not for Alice: for
        Alice, "garden" is as rare as "violin", so the shorter entry wins."""
        for n in range(30):
            add(api, user="bob", content=f"garden notes {n}")
        garden = add(api, content="garden")
        violin = add(api, content="violin lessons on tuesday and friday evenings")
        for n in range(5):
            add(api, content=f"unrelated thought number {n}")
        hits = search(api, query="garden violin", mode="lexical")
        assert ids(hits) == [garden["id"], violin["id"]]
        bob_hits = search(api, user="bob", query="garden violin", mode="lexical")
        assert len(bob_hits["hits"]) == 10 and garden["id"] not in ids(bob_hits)

    def test_shorter_entries_rank_first_for_the_same_words(self, api):
        long = add(api, content="tennis " + " ".join(f"filler{n}" for n in range(40)))
        short = add(api, content="tennis on sunday")
        assert ids(search(api, query="tennis", mode="lexical")) == [short["id"], long["id"]]

    def test_who_said_it_and_the_day_are_searched_with_the_content(self, api):
        said = add(
            api,
            content="I painted a sunset over the lake.",
            provenance={"author": "Melanie", "timestamp": "2023-05-08T13:56:00Z"},
        )
        add(api, content="I painted the fence.", provenance={"author": "Caroline"})
        add(api, content="Melanie likes lakes.")
        assert ids(search(api, query="What did Melanie paint?", mode="lexical"))[0] == said["id"]
        assert ids(search(api, query="May 2023", mode="lexical")) == [said["id"]]
        assert MemoryEntry.objects.get(pk=said["id"]).content == "I painted a sunset over the lake."
        assert_statistics_hold()

    def test_words_absent_from_the_scope_match_nothing(self, api):
        add(api, content="a quiet afternoon")
        assert search(api, query="xylophone zeppelin", mode="lexical")["hits"] == []
        assert search(api, user="nobody", query="afternoon", mode="lexical")["hits"] == []

    def test_filters_and_expiry_still_apply(self, api):
        kept = add(api, content="swimming lessons", metadata={"kind": "hobby"})
        add(api, content="swimming pool closed", metadata={"kind": "news"})
        hits = search(api, query="swimming", mode="lexical", filter={"kind": "hobby"})
        assert ids(hits) == [kept["id"]]

    def test_bounded_candidates_come_from_the_rarest_words(self, api, monkeypatch, caplog):
        """Past the bound, entries holding only the most common word are not scored; the
        ranking is still exact when that word could not lift them into the results."""
        rare = add(api, content="common words and a zebra")
        for n in range(12):
            add(api, content=f"common words {n}")
        monkeypatch.setattr(memory_search, "LEXICAL_MAX_CANDIDATES", 5)
        with caplog.at_level(logging.INFO, logger="ctxadmin.memory"):
            hits = search(api, query="zebra common", mode="lexical", limit=1)
        assert ids(hits) == [rare["id"]]
        bounded = [r for r in caplog.records if r.getMessage() == "memory_lexical_bounded"]
        assert len(bounded) == 1
        assert (bounded[0].terms, bounded[0].used, bounded[0].exact) == (2, 1, True)
        # Asking for more than the rare word's entries: not provably exact, and only the
        # candidates of the rare word are ranked.
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="ctxadmin.memory"):
            hits = search(api, query="zebra common", mode="lexical", limit=5)
        assert ids(hits) == [rare["id"]]
        bounded = [r for r in caplog.records if r.getMessage() == "memory_lexical_bounded"]
        assert bounded[0].exact is False


@pytest.mark.django_db
class TestStatistics:
    def test_adds_and_every_kind_of_removal_keep_them(self, api):
        from memory import tasks

        for n in range(6):
            add(api, content=f"walked the dog {n} times", provenance={"session_id": "s1"})
        entry = add(api, content="the dog barked at the mailman")
        add(api, user="bob", content="the dog sleeps")
        add(api, content="walked the dog", idempotency_key="k")
        add(api, status=200, content="walked the dog", idempotency_key="k")  # no change
        assert_statistics_hold()
        assert api.delete(f"{url()}/{entry['id']}").status_code == 204
        assert_statistics_hold()
        assert api.delete(f"{url()}?session_id=s1").status_code == 200
        assert_statistics_hold()
        with connection.cursor() as cursor:
            cursor.execute(
                "UPDATE memory_memoryentry SET expires_at = now() - interval '1 second', "
                "search = to_tsvector('english', 'rewritten words') WHERE user_id = 'bob'"
            )
        assert_statistics_hold()
        assert tasks.purge_expired() == 1
        assert_statistics_hold()

    def test_user_erasure_leaves_no_lexeme_of_the_scope(self, api, owner):
        add(api, content="my secret hobby is falconry")
        add(api, user="bob", content="falconry is fun")
        result = api.delete(url(), {"confirm": "erase user alice"}, format="json")
        assert result.status_code == 200, result.content
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM memory_termstats WHERE app_id = %s AND user_id = 'alice'",
                [owner.app.pk],
            )
            assert cursor.fetchone() == (0,)
            cursor.execute(
                "SELECT count(*) FROM memory_scopestats WHERE app_id = %s AND user_id = 'alice'",
                [owner.app.pk],
            )
            assert cursor.fetchone() == (0,)
        assert_statistics_hold()

    def test_deleting_the_app_removes_them(self, owner):
        add(owner.client(), content="a note")
        owner.app.delete()
        assert recomputed()[1] == (set(), set())


@pytest.mark.django_db(transaction=True)
def test_concurrent_adds_and_deletes_in_one_scope_keep_them_exact():
    """Writers to one scope queue on its statistics row: no deadlock, no lost update."""
    tenant = make_tenant("acme")
    words = ["apple", "banana", "cherry", "damson", "elder", "fig", "grape", "hazel"]
    client = tenant.client()
    seed = [add(client, content=" ".join(words[n % 8 :] + words[: n % 8])) for n in range(8)]
    barrier = threading.Barrier(8)
    failures: list[str] = []

    def work(number: int):
        try:
            client = tenant.client()
            rng = random.Random(number)
            barrier.wait()
            for step in range(6):
                picked = rng.sample(words, 4)
                result = client.post(
                    url(), {"content": f"{' '.join(picked)} {number} {step}"}, format="json"
                )
                if result.status_code != 201:
                    failures.append(f"add {result.status_code}")
            result = client.delete(f"{url()}/{seed[number]['id']}")
            if result.status_code != 204:
                failures.append(f"delete {result.status_code}")
        finally:
            connections.close_all()

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    assert_statistics_hold()
    holding = MemoryEntry.objects.filter(content__contains="apple").count()
    hits = search(tenant.client(), query="apple", mode="lexical", limit=100)
    assert len(hits["hits"]) == holding > 0


@pytest.mark.django_db
class TestHybridWithTheHashingEmbedder:
    """The hashing embedder sees the words BM25 sees: in hybrid search it only fills what
    lexical search leaves empty, so hybrid never ranks below lexical."""

    def test_hybrid_is_the_lexical_ranking_when_that_fills_the_limit(self, api):
        for n in range(6):
            add(api, content=f"planted tomatoes in the garden, row {n}")
        add(api, content="tomato soup recipe")
        lexical = search(api, query="garden tomatoes", mode="lexical", limit=5)
        hybrid = search(api, query="garden tomatoes", limit=5)
        assert ids(hybrid) == ids(lexical) and len(ids(hybrid)) == 5
        assert hybrid["hits"][0]["score_type"] == "rrf"
        scores = [hit["score"] for hit in hybrid["hits"]]
        assert scores == sorted(scores, reverse=True)

    def test_the_vector_ranking_fills_what_lexical_search_leaves(self, api):
        exact = add(api, content="we adopted a dalmatian puppy")
        misspelt = add(api, content="the dalmatians went to the vet")
        budget = add(api, content="quarterly budget review")
        lexical = search(api, query="dalmation", mode="lexical")
        assert lexical["hits"] == []  # a misspelling no lexeme matches
        hybrid = search(api, query="dalmation", limit=2)
        assert set(ids(hybrid)) == {exact["id"], misspelt["id"]}
        # Lexical hits come first, then the vector ranking's others with evidence: with
        # "puppy" beside it, the misspelling's n-grams weigh too little for the vet visit
        # (cosine 0.096), and the budget review shares nothing with the query; min_score
        # lifts the floor.
        mixed = search(api, query="puppy dalmation", limit=3)
        assert ids(mixed) == [exact["id"]]
        everything = search(api, query="puppy dalmation", limit=3, min_score=0)
        assert ids(everything) == [exact["id"], misspelt["id"], budget["id"]]

    def test_explicit_weights_fuse_both_rankings(self, api):
        add(api, content="we adopted a dalmatian puppy")
        hits = search(api, query="dalmation", weights={"lexical": 1, "vector": 1}, limit=1)
        assert len(hits["hits"]) == 1 and hits["hits"][0]["score_type"] == "weighted"
        none = search(api, query="dalmation", weights={"lexical": 1, "vector": 0}, limit=1)
        assert none["hits"] == []
        result = api.post(
            f"{url()}/search",
            {"query": "x", "weights": {"lexical": 0, "vector": 0}},
            format="json",
        )
        assert result.status_code == 400
        assert result.json()["error"]["details"]["field"] == "weights"

    def test_weighted_fusion_sums_min_max_normalised_scores(self, api):
        texts = [
            "the puppy chewed my slippers",
            "a puppy and a kitten",
            "slippers by the door",
            "kitten videos all evening",
            "the garden needs water",
        ]
        for text in texts:
            add(api, content=text)
        query = "puppy slippers"

        def normalised(mode):
            floor = {"lexical": 0, "vector": -1}[mode]  # every hit, as fusion ranks them
            hits = search(api, query=query, mode=mode, limit=50, min_score=floor)["hits"]
            scores = {hit["id"]: hit["score"] for hit in hits}
            high, low = max(scores.values()), min(scores.values())
            return {key: (value - low) / (high - low) for key, value in scores.items()}

        lexical, vector = normalised("lexical"), normalised("vector")
        expected = {
            key: 0.25 * lexical.get(key, 0) + 0.75 * vector.get(key, 0)
            for key in {*lexical, *vector}
        }
        weights = {"lexical": 0.25, "vector": 0.75}
        hybrid = search(api, query=query, weights=weights, limit=5, min_score=0)
        got = {hit["id"]: hit["score"] for hit in hybrid["hits"]}
        assert got == pytest.approx(expected, abs=1e-5)
        assert ids(hybrid) == sorted(expected, key=lambda key: -expected[key])
        # By default, the same scores for the entries with evidence only: the kitten videos
        # and the garden share no word with the query and point nowhere near it.
        floored = search(api, query=query, weights=weights, limit=5)
        assert [hit["content"] for hit in floored["hits"]] == [
            hit["content"]
            for hit in hybrid["hits"]
            if "kitten v" not in hit["content"] and "garden" not in hit["content"]
        ]
        assert len(floored["hits"]) == 3


def test_each_embedder_s_default_fusion(settings):
    from memory.embedders import LocalEmbedder
    from tests.embedding_helpers import LOCAL_INSTALLED

    request = inputs.parse_search({"query": "q"})
    settings.CTXADMIN_EMBEDDER = "hashing"
    assert memory_search.fusion_for(request) == fusion.Fusion("fill")
    if LOCAL_INSTALLED:
        settings.CTXADMIN_EMBEDDER = "local"
        assert LocalEmbedder.fusion_weight == 0.3
        assert memory_search.fusion_for(request) == fusion.Fusion("weighted", 0.7, 0.3)
    weighted = inputs.parse_search({"query": "q", "weights": {"vector": 2}})
    assert memory_search.fusion_for(weighted) == fusion.Fusion("weighted", 1.0, 2.0)


@pytest.mark.django_db
def test_vectors_stay_in_the_row_and_the_text_index_leads_with_the_scope():
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT attstorage FROM pg_attribute WHERE attrelid = 'memory_memoryentry'::regclass "
            "AND attname = 'embedding'"
        )
        assert cursor.fetchone() == ("p",)
        cursor.execute("SELECT indexdef FROM pg_indexes WHERE indexname = 'memory_scope_search'")
        assert "gin (app_id, user_id, search)" in cursor.fetchone()[0]


@pytest.mark.django_db
def test_a_typical_entry_keeps_its_lexical_vector_in_the_row(owner):
    """An entry of 60 distinct words with its embedding makes a row past 2 kB: the toaster
    must not move ``search`` out of line (BM25 scoring reads it for every candidate)."""
    client = owner.client()
    # Distinct, incompressible words: the toaster cannot shrink the values in place.
    words = " ".join(hashlib.sha256(str(n).encode()).hexdigest()[:12] for n in range(60))
    entry = add(client, content=f"The plan mentions {words}", embed="sync")
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_column_size(e.*) > 2100, pg_column_toast_chunk_id(search) IS NULL, "
            "pg_column_toast_chunk_id(embedding) IS NULL "
            "FROM memory_memoryentry e WHERE id = %s",
            [entry["id"]],
        )
        assert cursor.fetchone() == (True, True, True)
        cursor.execute(
            "SELECT attstorage FROM pg_attribute WHERE attrelid = 'memory_memoryentry'::regclass "
            "AND attname = 'search'"
        )
        assert cursor.fetchone() == ("m",)


@pytest.mark.django_db(transaction=True)
def test_the_statistics_migration_counts_the_entries_already_there():
    """Migrating back past the statistics drops them with their triggers; migrating forward
    again counts the entries written meanwhile, and the triggers keep counting after."""
    from django.core.management import call_command

    tenant = make_tenant("acme")
    client = tenant.client()
    add(client, content="first memory about sailing")
    call_command("migrate", "memory", "0002", verbosity=0)
    try:
        with connection.cursor() as cursor:
            cursor.execute(
                "INSERT INTO memory_memoryentry (id, app_id, user_id, content, content_sha256, "
                "metadata, search, content_bytes) VALUES (gen_random_uuid(), %s, 'bob', "
                "'written without triggers', '', '{}', "
                "to_tsvector('english', 'written without triggers'), 24)",
                [tenant.app.pk],
            )
    finally:
        # Every app forward again: migrating memory back also unapplied what depends on it.
        call_command("migrate", verbosity=0)
    assert_statistics_hold()
    add(client, user="bob", content="sailing again")
    assert_statistics_hold()
    hits = search(client, user="bob", query="sailing triggers", mode="lexical")
    assert len(hits["hits"]) == 2


@pytest.mark.django_db(transaction=True)
def test_reembed_stores_an_out_of_line_lexical_vector_back_in_the_row():
    """A row written before migration 0006 (its settings undone for the write) holds
    ``search`` in TOAST; ``reembed`` (as after the upgrade to hashing-v2) writes it back in
    the row, leaving the lexical statistics as they were."""
    from django.core.management import call_command

    client = make_tenant("acme").client()
    words = " ".join(hashlib.sha256(str(n).encode()).hexdigest()[:12] for n in range(60))
    restore = (
        "ALTER TABLE memory_memoryentry ALTER COLUMN search SET STORAGE MAIN; "
        "ALTER TABLE memory_memoryentry SET (toast_tuple_target = 4080)"
    )
    with connection.cursor() as cursor:
        cursor.execute(
            "ALTER TABLE memory_memoryentry ALTER COLUMN search SET STORAGE EXTENDED; "
            "ALTER TABLE memory_memoryentry RESET (toast_tuple_target)"
        )
        try:
            entry = add(client, content=f"The plan mentions {words}", embed="sync")
        finally:
            cursor.execute(restore)
        cursor.execute(
            "UPDATE memory_memoryentry SET embedding_model = 'hashing-v1-384' WHERE id = %s",
            [entry["id"]],
        )

        def state():
            cursor.execute(
                "SELECT pg_column_toast_chunk_id(search) IS NULL FROM memory_memoryentry "
                "WHERE id = %s",
                [entry["id"]],
            )
            inline = cursor.fetchone()[0]
            cursor.execute("SELECT sum(entries) FROM memory_termstats")
            return inline, cursor.fetchone()[0]

        before = state()
        assert before[0] is False  # out of line, as rows written before 0006
        call_command("reembed", stdout=io.StringIO())
        assert state() == (True, before[1])
