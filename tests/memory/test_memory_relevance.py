"""Search returns evidence, not just the top ``limit``: by default a query gets hits only
when some hit has a lexical match or a cosine similarity at or above the embedder's
calibrated ``min_similarity``, so a memory tool asking about something the user never
mentioned gets nothing; a query with evidence keeps its hits with a lexical match or a
cosine down to the embedder's ``min_related_similarity``. ``min_score`` replaces that floor
with one on the mode's own score scale."""

from __future__ import annotations

import pytest

from memory.embedders import HashingEmbedder, LocalEmbedder
from tests.embedding_helpers import LOCAL_INSTALLED
from tests.memory.test_memory_api import add, search

UNRELATED = [
    "Melanie painted a sunrise over the lake last year.",
    "The weather was rainy all week.",
    "Jon opened a dance studio downtown.",
    "Bought new running shoes on sale.",
]


@pytest.fixture
def api(owner):
    return owner.client()


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
class TestTheFloor:
    def test_a_question_about_nothing_remembered_finds_nothing(self, api, settings, embedder):
        settings.CTXADMIN_EMBEDDER = embedder
        for text in UNRELATED:
            add(api, content=text, embed="sync")
        for mode in ("vector", "hybrid"):
            assert (
                search(api, query="Which quantum chip does Caroline use?", mode=mode)["hits"] == []
            ), mode
        # min_score replaces the floor: the top `limit` whatever their evidence.
        assert len(search(api, query="quantum chip", mode="vector", min_score=-1)["hits"]) == 4
        assert len(search(api, query="quantum chip", mode="hybrid", min_score=0)["hits"]) == 4

    def test_a_related_memory_is_still_found(self, api, settings, embedder):
        settings.CTXADMIN_EMBEDDER = embedder
        for text in UNRELATED:
            add(api, content=text, embed="sync")
        painting = UNRELATED[0]
        for mode in ("vector", "hybrid"):
            hits = search(api, query="Who painted the sunrise by the lake?", mode=mode)["hits"]
            assert [hit["content"] for hit in hits][:1] == [painting], mode

    def test_min_score_is_on_the_mode_s_scale(self, api, settings, embedder):
        settings.CTXADMIN_EMBEDDER = embedder
        for text in UNRELATED:
            add(api, content=text, embed="sync")
        query = "painted sunrise lake"
        every = search(api, query=query, mode="vector", min_score=-1)["hits"]
        cut = every[1]["score"]
        above = search(api, query=query, mode="vector", min_score=cut)["hits"]
        assert above == every[:2] and all(hit["score_type"] == "cosine" for hit in above)
        lexical = search(api, query=query, mode="lexical")["hits"]
        assert (
            search(api, query=query, mode="lexical", min_score=lexical[0]["score"] + 1)["hits"]
            == []
        )


@pytest.mark.django_db
@pytest.mark.skipif(not LOCAL_INSTALLED, reason="the local extra")
class TestTwoLevels:
    """With ``local``: the painting's question scores 0.76 with the painting, 0.21 with the
    framed canvas and 0.19 with the week of rain (all-MiniLM-L6-v2), and shares no lexeme
    with either of those two."""

    QUERY = "Who painted the sunrise by the lake?"
    CANVAS = "Melanie framed her canvas for the gallery."

    def test_a_query_with_evidence_keeps_a_weaker_related_hit(self, api, settings):
        settings.CTXADMIN_EMBEDDER = "local"
        for text in (*UNRELATED, self.CANVAS):
            add(api, content=text, embed="sync")
        for mode in ("vector", "hybrid"):
            found = [hit["content"] for hit in search(api, query=self.QUERY, mode=mode)["hits"]]
            # The canvas, below min_similarity, was cut by a single floor; the painting makes
            # the query one with evidence, so it is kept. The shoes and the studio are not.
            assert found[0] == UNRELATED[0] and self.CANVAS in found, mode
            assert not {UNRELATED[2], UNRELATED[3]} & set(found), mode
        # min_score still replaces the floor.
        strict = search(api, query=self.QUERY, mode="vector", min_score=0.28)["hits"]
        assert [hit["content"] for hit in strict] == [UNRELATED[0]]
        every = search(api, query=self.QUERY, mode="vector", min_score=-1)["hits"]
        assert len(every) == 5

    def test_a_weak_hit_alone_is_no_evidence(self, api, settings):
        settings.CTXADMIN_EMBEDDER = "local"
        for text in UNRELATED[1:]:  # the rain, the studio, the shoes: no painting
            add(api, content=text, embed="sync")
        for mode in ("vector", "hybrid"):
            # The rain is above the lower level, but nothing reaches min_similarity.
            assert search(api, query=self.QUERY, mode=mode)["hits"] == [], mode
        every = search(api, query=self.QUERY, mode="hybrid", min_score=0)["hits"]
        assert len(every) == 3


def test_each_calibrated_embedder_has_its_thresholds():
    assert HashingEmbedder.min_similarity == 0.12
    assert HashingEmbedder.min_related_similarity == 0.12  # no ranked evidence below 0.12
    assert LocalEmbedder.min_similarity == 0.28
    assert LocalEmbedder.min_related_similarity == 0.17
