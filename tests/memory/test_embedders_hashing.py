"""The hashing embedder's properties: unit vectors, pinned values, stop words, stability across
processes, lexical similarity, the bounded token cache (no database)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time

import pytest

import memory.embedders.hashing as hashing_module
from ctxadmin import stack
from memory.embedders import (
    HashingEmbedder,
    embed_all,
)
from tests.embedding_helpers import (
    TEXTS,
    cosine,
    norm,
    soon,
)

# --------------------------------------------------------------------------- hashing


@pytest.mark.parametrize("dimension", [384, 64, 2])
def test_hashing_vectors_are_unit_length_of_the_given_dimension(dimension):
    embedder = HashingEmbedder(dimension)
    assert embedder.name == f"hashing-v2-{dimension}"
    assert embedder.dimension == dimension
    assert embedder.remote is False
    for text in TEXTS:
        vector = embedder.vector(text)
        assert len(vector) == dimension
        assert all(isinstance(value, float) and math.isfinite(value) for value in vector)
        assert norm(vector) == pytest.approx(1.0, abs=1e-12)


def test_hashing_default_dimension_is_384():
    assert HashingEmbedder().name == "hashing-v2-384"
    assert HashingEmbedder().dimension == 384


# Pinned from one run: a change here changes every stored vector, so it needs a new name
# (``hashing-v3-…``), not a new expected value.
PINNED_TEXT = "The user prefers dark mode in the editor"
PINNED = {68: 0.3473549601843347, 14: -0.07154435731416188, 1: 0.0, 100: 0.07154435731416188}
PINNED_NONZERO = 61


def test_hashing_leaves_stop_words_out_unless_there_is_nothing_else():
    embedder = HashingEmbedder()
    assert embedder.vector("The user prefers dark mode in the editor") == embedder.vector(
        "user prefers dark mode editor"
    )
    # A text of stop words only keeps them: it is not the empty text's vector.
    only = embedder.vector("what was it that he did")
    assert only != embedder.vector("") and only != embedder.vector("where are they")
    # Unrelated texts share no stop word mass: "the user" and "the editor" have nothing in
    # common but "the".
    assert cosine(embedder.vector("the user"), embedder.vector("the editor")) == pytest.approx(
        cosine(embedder.vector("user"), embedder.vector("editor"))
    )


def test_hashing_is_pinned():
    vector = HashingEmbedder().vector(PINNED_TEXT)
    for index, value in PINNED.items():
        assert vector[index] == pytest.approx(value, rel=1e-12, abs=1e-15)
    assert sum(1 for value in vector if value) == PINNED_NONZERO


def test_hashing_is_the_same_in_other_processes_whatever_the_hash_seed():
    script = (
        "import json, sys\n"
        "from memory.embedders import HashingEmbedder\n"
        "print(json.dumps([HashingEmbedder().vector(t) for t in json.loads(sys.argv[1])]))\n"
    )
    texts = [PINNED_TEXT, *TEXTS]
    here = [HashingEmbedder().vector(text) for text in texts]
    for seed in ("0", "12345"):
        result = subprocess.run(
            [sys.executable, "-c", script, json.dumps(texts)],
            env={**os.environ, "PYTHONHASHSEED": seed},
            cwd=stack.PROJECT_DIR,
            capture_output=True,
            check=True,
            timeout=60,
        )
        assert json.loads(result.stdout) == here


def test_hashing_places_similar_texts_closer_than_unrelated_ones():
    embedder = HashingEmbedder()
    anchor = embedder.vector("The user prefers dark mode in the code editor")
    similar = embedder.vector("the user prefers a dark theme in their editor")
    morphology = embedder.vector("users preferring darker modes for editors")
    unrelated = embedder.vector("Quarterly revenue grew twelve percent in Europe")
    assert cosine(anchor, similar) > 0.5
    assert cosine(anchor, morphology) > cosine(anchor, unrelated) + 0.1
    assert cosine(anchor, similar) > cosine(anchor, unrelated) + 0.3
    assert abs(cosine(anchor, unrelated)) < 0.2


def test_hashing_weighs_repeated_words_sublinearly_and_keeps_word_order():
    embedder = HashingEmbedder()
    once = embedder.vector("deploy the service")
    thrice = embedder.vector("deploy deploy deploy the service")
    assert 0.8 < cosine(once, thrice) < 1.0
    forward = embedder.vector("dog bites man")
    backward = embedder.vector("man bites dog")
    # Same words, other pairs: close, but not the same.
    assert 0.6 < cosine(forward, backward) < 0.99


@pytest.mark.parametrize("text", ["", "   ", "\n\t", "?!… --- ...", "🙂🙂"])
def test_hashing_text_without_words_is_the_reserved_unit_vector(text):
    embedder = HashingEmbedder(16)
    assert embedder.vector(text) == [1.0] + [0.0] * 15


def test_hashing_texts_with_words_never_use_the_reserved_dimension():
    embedder = HashingEmbedder(8)  # few dimensions: every other one is hit
    for text in [*TEXTS, "a", "x y z", "word " * 50]:
        vector = embedder.vector(text)
        assert vector[0] == 0.0
        assert norm(vector) == pytest.approx(1.0)


def test_hashing_is_case_insensitive_and_unicode_aware():
    embedder = HashingEmbedder()
    assert embedder.vector("Café CRÈME Brûlée") == embedder.vector("café crème brûlée")
    russian = embedder.vector("Пользователь предпочитает тёмную тему")
    assert russian[0] == 0.0  # Cyrillic words are words
    assert cosine(russian, embedder.vector("пользователь любит тёмную тему")) > 0.4
    assert embedder.vector("東京 大阪")[0] == 0.0


def test_hashing_long_tokens_count_as_whole_words():
    embedder = HashingEmbedder()
    blob = "a1b2c3d4" * 1000
    started = time.perf_counter()
    vector = embedder.vector(blob)
    assert time.perf_counter() - started < 0.5
    assert norm(vector) == pytest.approx(1.0)
    assert sum(1 for value in vector if value) == 1


def test_hashing_cache_is_bounded_and_does_not_change_vectors(monkeypatch):
    monkeypatch.setattr(hashing_module, "_CACHE_ENTRIES", 10)
    small = HashingEmbedder()
    texts = [f"word{i} other{i} shared words" for i in range(40)]
    vectors = [small.vector(text) for text in texts]
    assert len(small._tokens) <= 10
    monkeypatch.setattr(hashing_module, "_CACHE_ENTRIES", 50_000)
    assert vectors == [HashingEmbedder().vector(text) for text in texts]


@pytest.mark.parametrize("dimension", [0, 1, -5, 16001, True, 3.0, "384", None])
def test_hashing_refuses_a_bad_dimension(dimension):
    with pytest.raises(ValueError):
        HashingEmbedder(dimension)


def test_hashing_through_embed_all():
    embedder = HashingEmbedder()
    vectors = embed_all(embedder, TEXTS, deadline=soon())
    assert vectors == [pytest.approx(embedder.vector(text), abs=1e-15) for text in TEXTS]
