"""Chinese, Japanese and Korean text, written without spaces between words, is found by its
words: runs of those scripts are indexed as their characters and character pairs beside the
text search configuration's lexemes, and a query is read the same way (its pairs, or the
character of a one-character run)."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.db import connection

from tests.embedding_helpers import LOCAL_INSTALLED
from tests.memory.test_memory_api import add, search


@pytest.fixture
def api(owner):
    return owner.client()


@pytest.fixture
def diary(api):
    texts = {
        "japanese": "私の名前は太郎です。東京に住んでいます。",
        "chinese": "我上周在北京吃了烤鸭。",
        "korean": "어제 서울에서 친구를 만났어요.",
        "english": "Taro moved to Tokyo last spring.",
        "other": "Melanie painted a sunrise over the lake.",
    }
    return {name: add(api, content=text)["id"] for name, text in texts.items()}


def found(api, query: str, mode: str = "lexical") -> list[str]:
    return [hit["id"] for hit in search(api, query=query, mode=mode)["hits"]]


@pytest.mark.django_db
class TestCjkLexicalSearch:
    @pytest.mark.parametrize(
        ("query", "expected"),
        [
            ("太郎", "japanese"),  # a name inside a sentence
            ("東京に住む", "japanese"),  # shares 東京 and に住
            ("北京", "chinese"),
            ("烤鸭", "chinese"),
            ("鸭", "chinese"),  # one character
            ("서울", "korean"),  # a word with its particle attached (서울에서)
        ],
    )
    @pytest.mark.parametrize("mode", ["lexical", "hybrid"])
    def test_a_word_inside_unspaced_text_is_found(self, api, diary, query, expected, mode):
        assert found(api, query, mode)[0] == diary[expected]

    def test_no_shared_pair_no_hit(self, api, diary):
        assert found(api, "花子") == []
        # A pair spanning the query's two characters, not each character alone.
        assert found(api, "京北") == []

    def test_a_query_mixing_latin_and_cjk_finds_both(self, api, diary):
        hits = found(api, "Tokyo 太郎")
        assert set(hits) == {diary["english"], diary["japanese"]}
        both = add(api, content="Tokyo: 太郎さんと会った")["id"]
        assert found(api, "Tokyo 太郎")[0] == both

    def test_english_text_is_indexed_as_before(self, api, diary):
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM memory_memoryentry "
                "WHERE content ~ '^[ -~]*$' AND search <> to_tsvector(%s::regconfig, content)",
                [settings.CTXADMIN_MEMORY_TS_CONFIG],
            )
            assert cursor.fetchone() == (0,)

    def test_a_cjk_query_is_planned_as_an_english_one(self, owner, diary):
        """A CJK lexeme is a lexeme of the same ``search`` column, so the lexical statement
        is planned the same way for either (the English path's statements are unchanged),
        and the scope's GIN index answers a lexeme alone."""
        with connection.cursor() as cursor:
            cursor.execute(
                "INSERT INTO memory_memoryentry (id, app_id, user_id, content, content_sha256, "
                "metadata, search, content_bytes, created_at, updated_at) "
                "SELECT gen_random_uuid(), %s, 'alice', c, md5(c), '{}', "
                "memory_search_vector(%s::regconfig, c), octet_length(c), now(), now() "
                "FROM (SELECT 'note ' || n || ' about the garden 花園' AS c "
                "FROM generate_series(1, 3000) n) t",
                [owner.app.pk, settings.CTXADMIN_MEMORY_TS_CONFIG],
            )
            cursor.execute("ANALYZE memory_memoryentry")
            cursor.execute("SET LOCAL enable_seqscan = off")
            scoped = "app_id = %s AND user_id = 'alice' AND search @@ %s::tsquery"
            plans = {}
            for lexeme in ("太郎", "tokyo"):
                for where, params in (
                    (scoped, [owner.app.pk, f"'{lexeme}'"]),
                    ("search @@ %s::tsquery", [f"'{lexeme}'"]),
                ):
                    cursor.execute(
                        f"EXPLAIN (COSTS OFF) SELECT id FROM memory_memoryentry WHERE {where}",  # noqa: S608
                        params,
                    )
                    plan = "\n".join(row[0] for row in cursor.fetchall())
                    plans[lexeme, where == scoped] = plan.replace(lexeme, "?")
        assert plans["太郎", True] == plans["tokyo", True]
        assert "memory_scope_search" in plans["太郎", False]


EMBEDDERS = [
    pytest.param("hashing", id="hashing"),
    pytest.param(
        "local",
        id="local",
        marks=pytest.mark.skipif(not LOCAL_INSTALLED, reason="the local extra"),
    ),
]


@pytest.mark.django_db
@pytest.mark.parametrize("embedder", EMBEDDERS)
@pytest.mark.parametrize("mode", ["hybrid", "vector"])
class TestTheFloorHoldsForCjk:
    """all-MiniLM-L6-v2 reads these scripts as characters with little meaning: "天気" scores
    0.41 with "私の名前は太郎です", above its 0.28 floor, and any two such texts about as much
    (memory/embedders/local.py). For a CJK query only a lexical match is evidence."""

    @pytest.fixture
    def cjk(self, api, settings, embedder):
        settings.CTXADMIN_EMBEDDER = embedder
        texts = {
            "name": "私の名前は太郎です",
            "japanese": "私の名前は太郎です。東京に住んでいます。",
            "chinese": "我上周在北京吃了烤鸭。",
            "korean": "어제 서울에서 친구를 만났어요.",
            "english": "Melanie painted a sunrise over the lake.",
        }
        return {name: add(api, content=text, embed="sync")["id"] for name, text in texts.items()}

    def test_an_unrelated_cjk_sentence_is_no_hit(self, api, cjk, mode):
        assert found(api, "天気", mode) == []
        assert found(api, "烤面包", mode) == []  # shares one character, no pair
        weather = add(api, content="明日の天気は雨になるそうです。", embed="sync")["id"]
        assert found(api, "天気", mode) == [weather]

    @pytest.mark.parametrize(
        ("query", "expected"),
        [
            ("太郎", {"name", "japanese"}),
            ("東京に住む", {"japanese"}),
            ("北京", {"chinese"}),
            ("烤鸭", {"chinese"}),
            ("서울", {"korean"}),
            ("친구를 만났어요", {"korean"}),
        ],
    )
    def test_a_related_cjk_query_finds_its_memories_and_only_them(
        self, api, cjk, mode, query, expected
    ):
        assert set(found(api, query, mode)) == {cjk[name] for name in expected}

    def test_min_score_still_replaces_the_floor(self, api, cjk, mode):
        low = {"vector": -1, "hybrid": 0}[mode]
        assert len(search(api, query="天気", mode=mode, min_score=low)["hits"]) == 5

    def test_an_english_query_keeps_its_vector_evidence(self, api, cjk, mode):
        hits = found(api, "Who painted the sunrise by the lake?", mode)
        assert hits[:1] == [cjk["english"]]
