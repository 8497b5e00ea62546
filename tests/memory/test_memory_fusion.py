"""The pure scoring and rank fusion of memory search (``memory/fusion.py``): no database."""

from __future__ import annotations

import codecs
import importlib
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memory.fusion import (
    BM25_B,
    BM25_K1,
    CJK,
    RRF_K,
    Fusion,
    bm25_ceiling,
    bm25_idf,
    choose,
    cosines_are_evidence,
    evidenced,
    filled,
    fuse,
    normalised,
)


def test_choose_weights_then_calibration_then_rrf():
    assert choose({"vector": 2}, 0.3) == Fusion("weighted", 1.0, 2.0)
    assert choose(None, None) == Fusion("rrf")
    assert choose(None, 0) == Fusion("fill")
    assert choose(None, 0.3) == Fusion("weighted", 0.7, 0.3)


def test_bm25_idf_and_ceiling():
    assert bm25_idf(10, 1) == math.log(1 + 9.5 / 1.5)
    assert bm25_idf(10, 10) < bm25_idf(10, 5) < bm25_idf(10, 1)
    assert bm25_ceiling() == (BM25_K1 + 1) / (1 + BM25_K1 * (1 - BM25_B))


def test_normalised_maps_onto_zero_to_one():
    assert normalised([]) == {}
    assert normalised([("a", 3.0), ("b", 2.0), ("c", 1.0)]) == {"a": 1.0, "b": 0.5, "c": 0.0}
    assert normalised([("a", 2.0), ("b", 2.0)]) == {"a": 1.0, "b": 1.0}


def test_rrf_adds_each_rankings_reciprocal_rank():
    fused = fuse(Fusion("rrf"), [("a", 9), ("b", 8)], [("b", 0.9), ("c", 0.8)], 10)
    assert dict(fused) == {
        "a": 1 / (RRF_K + 1),
        "b": 1 / (RRF_K + 2) + 1 / (RRF_K + 1),
        "c": 1 / (RRF_K + 2),
    }
    assert [entry_id for entry_id, _ in fused] == ["b", "a", "c"]


def test_weighted_fusion_and_the_limit():
    fused = fuse(Fusion("weighted", 1.0, 2.0), [("a", 5), ("b", 1)], [("b", 0.9), ("c", 0.1)], 2)
    assert fused == [("b", 2.0), ("a", 1.0)]


def test_equal_scores_keep_the_lexical_order_first():
    fused = fuse(Fusion("weighted"), [("a", 1), ("b", 1)], [("c", 1)], 10)
    assert [entry_id for entry_id, _ in fused] == ["a", "b", "c"]


def test_filled_scores_rank_by_rank_on_the_rrf_scale():
    assert filled(["x", "y", "z"], 2) == [("x", 1 / (RRF_K + 1)), ("y", 1 / (RRF_K + 2))]


RANKING = st.lists(
    st.tuples(st.sampled_from("abcdefgh"), st.floats(-10, 10)), max_size=8, unique_by=lambda r: r[0]
)


@given(RANKING, RANKING, st.integers(1, 10), st.sampled_from(["rrf", "weighted"]))
def test_fusion_holds_each_entry_once_best_first_within_the_limit(lexical, vector, limit, method):
    fused = fuse(Fusion(method), lexical, vector, limit)
    ids = [entry_id for entry_id, _ in fused]
    assert len(ids) == len(set(ids)) <= limit
    assert set(ids) <= {entry_id for entry_id, _ in lexical + vector}
    scores = [score for _, score in fused]
    assert scores == sorted(scores, reverse=True)


def test_evidence_is_a_lexical_match_or_a_cosine_at_the_floor():
    ranked = [("lexical-only", 0.9), ("near", 0.8), ("at", 0.7), ("far", 0.6), ("both", 0.5)]
    cosines = {"near": 0.5, "at": 0.3, "far": 0.29, "both": -0.2}
    kept = evidenced(ranked, {"lexical-only", "both"}, cosines, 0.3, 0.3)
    assert kept == [("lexical-only", 0.9), ("near", 0.8), ("at", 0.7), ("both", 0.5)]
    assert evidenced(ranked, set(), {}, -1.0, -1.0) == []  # no cosine known: no evidence


def test_a_query_with_evidence_keeps_its_weaker_related_hits():
    ranked = [("strong", 0.9), ("weak", 0.8), ("weaker", 0.7), ("unrelated", 0.6)]
    cosines = {"strong": 0.4, "weak": 0.2, "weaker": 0.17, "unrelated": 0.1}
    # One hit at min_similarity is evidence: the others are kept down to the lower level.
    assert evidenced(ranked, set(), cosines, 0.28, 0.17) == ranked[:3]
    # Without it, no hit: not even those above the lower level.
    weak_only = {**cosines, "strong": 0.27}
    assert evidenced(ranked, set(), weak_only, 0.28, 0.17) == []
    # A lexical match is evidence too, and is kept whatever its cosine.
    assert evidenced(ranked, {"unrelated"}, weak_only, 0.28, 0.17) == ranked
    assert evidenced(ranked, {"unrelated"}, weak_only, 0.28, 0.3) == [("unrelated", 0.6)]
    # The lower level is never above min_similarity.
    assert evidenced(ranked, set(), cosines, 0.28, 0.5) == [("strong", 0.9)]


@pytest.mark.parametrize(
    ("query", "cjk"),
    [
        ("天気", True),  # Japanese (Han)
        ("てんき", True),  # hiragana
        ("烤鸭", True),  # Chinese
        ("날씨", True),  # Korean
        ("\u1102\u1161\u11af", True),  # Korean as jamo (NFD)
        ("Tokyo 太郎", True),  # mixed
        ("What is the weather in Tokyo?", False),
        ("Café déjà vu", False),
        ("Погода", False),
    ],
)
def test_a_cjk_query_counts_cosines_only_with_an_embedder_that_reads_it(query, cjk):
    assert cosines_are_evidence(query, reads_cjk=True)
    assert cosines_are_evidence(query, reads_cjk=False) is not cjk


def test_the_cjk_class_is_the_lexical_index_s():
    migration = importlib.import_module("memory.migrations.0012_unicode_and_cjk_lexemes")
    assert CJK.pattern + "+" == codecs.decode(migration.CJK, "unicode_escape")
