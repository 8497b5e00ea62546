"""Search returns evidence, not just the top ``limit``: by default a hit has a lexical match
or a cosine similarity at or above the embedder's calibrated ``min_similarity``, so a memory
tool asking about something the user never mentioned gets nothing; ``min_score`` replaces
that floor with one on the mode's own score scale."""

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


def test_each_calibrated_embedder_has_its_threshold():
    assert HashingEmbedder.min_similarity == 0.12
    assert LocalEmbedder.min_similarity == 0.28
