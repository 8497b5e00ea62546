"""LoCoMo evidence recall: each conversation's turns added as memories, every question
searched lexically, by vector and hybrid (and the weight sweep), beside BM25 and, with the
``local`` extra, dense MiniLM and their RRF in this process and a service with the local
embedder."""

from __future__ import annotations

import json
import re
import shutil
import statistics
import time

from django.core.exceptions import ImproperlyConfigured

from bench import locomo
from bench.memory_search.plan import (
    DEPTH,
    FUSION_DEPTH,
    GROUPS,
    KS,
    MODES,
    RRF_K,
    SWEEP,
    memories_url,
)
from bench.service import bench_client, bench_service, stop_service
from ctxadmin import stack
from memory.embedders import HashingEmbedder, LocalEmbedder, embed_all


def turns(sample: dict) -> list[dict]:
    """The conversation's turns in order, each with its ``memory``: the text as it is
    remembered, "Speaker: text" (who said a thing is part of what is recalled, and questions
    name the speaker; the published LoCoMo retrieval figures index turns the same way)."""
    conversation = sample["conversation"]
    numbers = sorted(
        int(key.split("_")[1])
        for key in conversation
        if re.fullmatch(r"session_\d+", key) and conversation[key]
    )
    return [
        {**turn, "memory": f"{turn['speaker']}: {turn['text']}"}
        for number in numbers
        for turn in conversation[f"session_{number}"]
    ]


def questions(sample: dict, known: set[str]) -> tuple[list[dict], int]:
    """The questions with evidence among the conversation's turns (as a set of dia_ids),
    and how many were left out for having none."""
    kept, left_out = [], 0
    for qa in sample["qa"]:
        wanted = {
            part for entry in qa.get("evidence", []) for part in re.split(r"[;,\s]+", entry) if part
        } & known
        if not wanted:
            left_out += 1
            continue
        group = "5" if qa["category"] == 5 else "1-4"
        kept.append({"question": qa["question"], "group": group, "evidence": wanted})
    return kept, left_out


def index_conversation(api, user: str, sample_turns: list[dict]) -> dict:
    url = memories_url(api, user)
    refused: list[str] = []
    model = None
    started = time.perf_counter()
    for turn in sample_turns:
        status, body = api.request(
            "POST",
            url,
            {
                "content": turn["memory"],
                "metadata": {"dia_id": turn["dia_id"], "speaker": turn["speaker"]},
                "idempotency_key": turn["dia_id"],
                "embed": "sync",
            },
        )
        if status in (200, 201):
            model = body.get("embedding_model") or model
        elif status == 422:
            refused.append(f"{turn['dia_id']}: {body.get('error', body)}")
        else:
            raise RuntimeError(f"adding {turn['dia_id']} failed: {status} {str(body)[:300]}")
    seconds = time.perf_counter() - started
    return {
        "turns": len(sample_turns),
        "added": len(sample_turns) - len(refused),
        "refused": refused,
        "adds_per_s": round(len(sample_turns) / seconds, 1),
        "embedding_model": model,
    }


def api_ranking(api, user: str, query: str, mode: str, weights: dict | None = None) -> list:
    body: dict = {"query": query, "mode": mode, "limit": DEPTH}
    if weights is not None:
        body["weights"] = weights
    hits = api.post(f"{memories_url(api, user)}/search", body)["hits"]
    return [hit["metadata"].get("dia_id") for hit in hits]


def bm25_rankings(
    sample_turns: list[dict], texts: list[str], depth: int = DEPTH
) -> list[list[str]]:
    """BM25 (bm25s defaults: Lucene, k1 = 1.5, b = 0.75; English stopwords, Snowball
    stemmer) over the turns, ``depth`` deep; documents scoring 0 (no query term) are not
    retrieved."""
    # bm25s and PyStemmer: bench extras, imported only when the BM25 baseline runs.
    import bm25s
    import Stemmer

    stemmer = Stemmer.Stemmer("english")
    corpus = [turn["memory"] for turn in sample_turns]
    retriever = bm25s.BM25()
    retriever.index(
        bm25s.tokenize(corpus, stopwords="en", stemmer=stemmer, show_progress=False),
        show_progress=False,
    )
    tokens = bm25s.tokenize(
        texts, stopwords="en", stemmer=stemmer, show_progress=False, return_ids=False
    )
    found = retriever.retrieve(tokens, k=min(depth, len(corpus)), show_progress=False)
    rankings = []
    for documents, scores in zip(found.documents, found.scores, strict=True):
        rankings.append(
            [
                sample_turns[int(doc)]["dia_id"]
                for doc, score in zip(documents, scores, strict=True)
                if score > 0
            ]
        )
    return rankings


def minilm_rankings(
    embedder, sample_turns: list[dict], texts: list[str], depth: int = FUSION_DEPTH
) -> list[list[str]]:
    """Dense retrieval with all-MiniLM-L6-v2 in this process (the local embedder, the same
    model and vectors as the service's ``local``): the turns by cosine similarity to each
    text, ``depth`` deep."""
    # numpy: of the local extra, imported only when the MiniLM baseline runs.
    import numpy as np

    deadline = time.monotonic() + 3600
    corpus = np.array(
        embed_all(embedder, [turn["memory"] for turn in sample_turns], deadline=deadline)
    )
    queries = np.array(embed_all(embedder, texts, deadline=deadline))
    rankings = []
    for similarities in queries @ corpus.T:
        best = np.argsort(-similarities, kind="stable")[:depth]
        rankings.append([sample_turns[int(i)]["dia_id"] for i in best])
    return rankings


def rrf(*rankings: list[str], depth: int = DEPTH) -> list[str]:
    """Reciprocal rank fusion (k = 60, equal weights, ranks from 1), as the service fuses."""
    fused: dict[str, float] = {}
    for ranking in rankings:
        for rank, item in enumerate(ranking, start=1):
            fused[item] = fused.get(item, 0.0) + 1 / (RRF_K + rank)
    return sorted(fused, key=lambda item: -fused[item])[:depth]


def variants() -> dict[str, dict | None]:
    """Name → the hybrid weights (``None``: the mode's default)."""
    named: dict[str, dict | None] = {mode: None for mode in MODES}
    for weight in SWEEP:
        named[f"hybrid_w{weight:g}"] = {"lexical": 1 - weight, "vector": weight}
    return named


def recall(ranking: list[str], evidence: set[str], k: int) -> float:
    return len(set(ranking[:k]) & evidence) / len(evidence)


def locomo_conversations() -> list[dict]:
    """Each LoCoMo dev conversation: its turns and its questions with evidence among them."""
    prepared = []
    for sample in json.loads(locomo.DATA.read_text()):
        sample_turns = turns(sample)
        asked, left_out = questions(sample, {turn["dia_id"] for turn in sample_turns})
        prepared.append(
            {
                "sample_id": sample["sample_id"],
                "turns": sample_turns,
                "asked": asked,
                "left_out": left_out,
            }
        )
    return prepared


def service_rankings(api, prepared: list[dict]) -> tuple[list[dict], dict[str, list]]:
    """Each conversation added to a service (one user each), then every question searched
    with each of ``variants()``: per conversation its figures, per variant the rankings of
    all questions in order."""
    conversations = []
    rankings: dict[str, list] = {name: [] for name in variants()}
    for conversation in prepared:
        user = f"recall-{conversation['sample_id']}"
        asked = conversation["asked"]
        info = index_conversation(api, user, conversation["turns"])
        info.update(
            sample_id=conversation["sample_id"],
            questions=len(asked),
            left_out=conversation["left_out"],
        )
        started = time.perf_counter()
        for name, weights in variants().items():
            mode = "hybrid" if name.startswith("hybrid") else name
            rankings[name] += [api_ranking(api, user, q["question"], mode, weights) for q in asked]
        info["searches_per_s"] = round(
            len(asked) * len(variants()) / (time.perf_counter() - started), 1
        )
        conversations.append(info)
    return conversations, rankings


def local_service_rankings(prepared: list[dict]) -> tuple[list[dict], dict[str, list]]:
    """``service_rankings`` on a second service started with ``CTXADMIN_EMBEDDER=local``
    (the embedder is a setting of the whole process), in its own ``var`` folder."""
    var = stack.var_dir() / "bench-memory-local"
    shutil.rmtree(var, ignore_errors=True)
    service = bench_service(var, extra_env={"CTXADMIN_EMBEDDER": "local"})
    try:
        api = bench_client(service, "bench-memory-local", "memory")
        return service_rankings(api, prepared)
    finally:
        stop_service(service)


def default_fusion_weight(model: str | None) -> float | None:
    """The vector weight the service's hybrid search gives the embedder named ``model``."""
    if model and model.startswith("hashing"):
        return HashingEmbedder.fusion_weight
    if model == LocalEmbedder.name:
        return LocalEmbedder.fusion_weight
    return None


def locomo_recall(api, *, local: bool = True) -> dict:
    """Evidence recall of the service behind ``api`` and of BM25; with ``local`` (and the
    ``local`` extra installed), also of dense MiniLM and BM25 + MiniLM RRF in this process
    and of a second service with the local embedder (rows ``local_<variant>``)."""
    prepared = locomo_conversations()
    asked = [q for conversation in prepared for q in conversation["asked"]]
    conversations, rankings = service_rankings(api, prepared)
    texts = [[q["question"] for q in conversation["asked"]] for conversation in prepared]
    rankings["bm25"] = [
        ranking
        for conversation, questions_ in zip(prepared, texts, strict=True)
        for ranking in bm25_rankings(conversation["turns"], questions_)
    ]
    local_info: dict = {}
    if local:
        try:
            embedder = LocalEmbedder()
        except ImproperlyConfigured as exc:
            local_info["skipped"] = str(exc)
        else:
            deep_bm25, dense = [], []
            for conversation, questions_ in zip(prepared, texts, strict=True):
                deep_bm25 += bm25_rankings(conversation["turns"], questions_, FUSION_DEPTH)
                dense += minilm_rankings(embedder, conversation["turns"], questions_)
            rankings["minilm"] = [ranking[:DEPTH] for ranking in dense]
            rankings["bm25_minilm_rrf"] = [
                rrf(lexical, vector) for lexical, vector in zip(deep_bm25, dense, strict=True)
            ]
            local_conversations, local_rankings = local_service_rankings(prepared)
            for name, found in local_rankings.items():
                rankings[f"local_{name}"] = found
            model = next(
                (c["embedding_model"] for c in local_conversations if c["embedding_model"]), None
            )
            local_info = {
                "conversations": local_conversations,
                "embedding_model": model,
                "default_vector_weight": default_fusion_weight(model),
            }
    table = {
        name: {
            group: {
                f"@{k}": round(
                    statistics.mean(
                        recall(ranking, q["evidence"], k)
                        for q, ranking in zip(asked, found, strict=True)
                        if q["group"] == group
                    ),
                    4,
                )
                for k in KS
            }
            for group in GROUPS
        }
        for name, found in rankings.items()
    }
    model = next((c["embedding_model"] for c in conversations if c["embedding_model"]), None)

    def at_least(name: str, other: str, group: str) -> bool:
        return all(table[name][group][f"@{k}"] >= table[other][group][f"@{k}"] for k in KS)

    checks = {}
    for group in GROUPS:
        checks[group] = {
            "lexical_ge_bm25": at_least("lexical", "bm25", group),
            "hybrid_ge_lexical": at_least("hybrid", "lexical", group),
            "passing_vector_weights": [
                w for w in SWEEP if at_least(f"hybrid_w{w:g}", "lexical", group)
            ],
        }
        if "local_hybrid" in table:
            checks[group].update(
                local_hybrid_ge_rrf=at_least("local_hybrid", "bm25_minilm_rrf", group),
                local_hybrid_ge_lexical=at_least("local_hybrid", "local_lexical", group),
                local_passing_vector_weights=[
                    w for w in SWEEP if at_least(f"local_hybrid_w{w:g}", "local_lexical", group)
                ],
                local_vector_weights_ge_rrf=[
                    w for w in SWEEP if at_least(f"local_hybrid_w{w:g}", "bm25_minilm_rrf", group)
                ],
            )
    return {
        "conversations": conversations,
        "questions": {group: sum(q["group"] == group for q in asked) for group in GROUPS},
        "embedding_model": model,
        "default_vector_weight": default_fusion_weight(model),
        "local": local_info or None,
        "recall": table,
        "checks": checks,
    }
