"""Scoring and rank fusion of memory search: BM25's weights, and how a hybrid search
combines its lexical and vector rankings.

Pure: rankings in, ranking out — ``(entry id, score)`` pairs, best first. No Django, no
database (``memory/search.py`` runs the queries).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

RRF_K = 60
# Chinese, Japanese and Korean characters: the class ``memory_search_vector`` indexes as
# characters and character pairs (migration 0012), in Python's notation.
CJK = re.compile(
    "[\u3040-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
    "\uff66-\uff9f\uac00-\ud7af\u1100-\u11ff\u3130-\u318f"
    "\U00020000-\U0003134f]"
)
# BM25 (Lucene's formula and default parameters); a lexeme counts once per entry, and an
# entry's length is the number of distinct lexemes in its ``search`` vector.
BM25_K1 = 1.2
BM25_B = 0.75


def bm25_idf(entries: int, df: int) -> float:
    """A lexeme's BM25 idf in a scope of ``entries`` entries, ``df`` of which hold it."""
    return math.log(1 + (entries - df + 0.5) / (df + 0.5))


def bm25_ceiling() -> float:
    """At most this times a lexeme's idf is what it adds to an entry's score."""
    return (BM25_K1 + 1) / (1 + BM25_K1 * (1 - BM25_B))


@dataclass(frozen=True)
class Fusion:
    """How a hybrid search combines its two rankings: ``fill`` (the lexical ranking, then
    the vector ranking's other entries where it leaves room), ``rrf`` (reciprocal rank
    fusion) or ``weighted`` (each ranking's scores min-max normalised over its top
    ``depth``, then weighted and summed; an entry absent from a ranking scores 0 there)."""

    method: str
    lexical: float = 1.0
    vector: float = 1.0


def choose(weights: dict[str, float] | None, fusion_weight: float | None) -> Fusion:
    """Weighted score fusion with the request's ``weights``; else the embedder's measured
    calibration (``fusion_weight``), and reciprocal rank fusion for one not measured. A weak
    embedder weighs less, or only fills: hybrid search is never worse than lexical search
    alone."""
    if weights is not None:
        return Fusion("weighted", **{"lexical": 1.0, "vector": 1.0, **weights})
    if fusion_weight is None:
        return Fusion("rrf")
    if fusion_weight == 0:
        return Fusion("fill")
    return Fusion("weighted", lexical=1.0 - fusion_weight, vector=fusion_weight)


def normalised(rows: list[tuple]) -> dict[str, float]:
    """Scores mapped onto 0..1 by min-max over the ranking (all 1 when they are equal)."""
    if not rows:
        return {}
    scores = [float(score) for _id, score in rows]
    high, low = max(scores), min(scores)
    span = high - low
    return {entry_id: (float(score) - low) / span if span else 1.0 for entry_id, score in rows}


def fuse(fusion: Fusion, lexical: list[tuple], vector: list[tuple], limit: int) -> list[tuple]:
    """The top ``limit`` of the two rankings fused by ``fusion`` (``rrf`` or ``weighted``)."""
    fused: dict[str, float] = {}
    if fusion.method == "rrf":
        for weight, rows in ((fusion.lexical, lexical), (fusion.vector, vector)):
            for rank, (entry_id, _score) in enumerate(rows, start=1):
                fused[entry_id] = fused.get(entry_id, 0.0) + weight / (RRF_K + rank)
    else:
        for weight, rows in ((fusion.lexical, lexical), (fusion.vector, vector)):
            for entry_id, score in normalised(rows).items():
                fused[entry_id] = fused.get(entry_id, 0.0) + weight * score
    # Stable: equal scores keep the lexical ranking's order, then the vector ranking's.
    return sorted(fused.items(), key=lambda item: -item[1])[:limit]


def filled(found: list[str], limit: int) -> list[tuple]:
    """Entry ids in their order (the lexical ranking, then the vector ranking's others),
    scored on the RRF scale, rank by rank: the ``fill`` fusion's ranking."""
    return [
        (entry_id, 1.0 / (RRF_K + rank)) for rank, entry_id in enumerate(found[:limit], start=1)
    ]


def cosines_are_evidence(query: str, reads_cjk: bool) -> bool:
    """Whether the embedder's cosine similarities to ``query`` may count as evidence for the
    relevance floor: always, unless the query holds Chinese, Japanese or Korean text and the
    embedder does not tell related from unrelated text in those scripts (``reads_cjk``); then
    only a lexical match is evidence, and a hit needs one."""
    return reads_cjk or CJK.search(query) is None


def evidenced(
    ranked: list[tuple],
    lexical: set[str],
    cosines: dict[str, float],
    min_similarity: float,
    min_related_similarity: float,
) -> list[tuple]:
    """The relevance floor, in two levels. First, whether the scope holds evidence for the
    query at all: some entry of ``ranked`` has a lexical match (an id in ``lexical``) or a
    cosine similarity to the query (``cosines``) at or above ``min_similarity``; without
    any, nothing (a memory tool pastes nothing unrelated). Then, for a query with evidence,
    its entries with a lexical match or a cosine at or above ``min_related_similarity``
    (never above ``min_similarity``): a weaker related entry ranked below the evidence is
    kept. Order and scores are kept; an entry with no cosine known has none."""
    related = min(min_related_similarity, min_similarity)
    kept = [
        (entry_id, score)
        for entry_id, score in ranked
        if entry_id in lexical or cosines.get(entry_id, -math.inf) >= related
    ]
    if any(
        entry_id in lexical or cosines.get(entry_id, -math.inf) >= min_similarity
        for entry_id, _score in kept
    ):
        return kept
    return []
