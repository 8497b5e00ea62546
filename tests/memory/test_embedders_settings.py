"""``embedder_from_settings``: the default hashing embedder, the HTTP kinds from
``CTXADMIN_PROVIDERS`` connections, and the unusable combinations (no database)."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from memory.embedders import (
    GeminiEmbedder,
    HashingEmbedder,
    OpenAICompatibleEmbedder,
    embedder_from_settings,
)
from tests.embedding_helpers import (
    KEY,
)

# --------------------------------------------------------------------------- settings


PROVIDERS = {
    "emb-openai": {
        "kind": "openai_compatible",
        "base_url": "http://127.0.0.1:9/v1",
        "api_key_env": "CTXADMIN_TEST_EMBED_KEY",
    },
    "emb-gemini": {"kind": "gemini", "base_url": "http://127.0.0.1:9"},
}


def test_default_is_the_hashing_embedder_built_once():
    with override_settings():
        from django.conf import settings

        for name in (
            "CTXADMIN_EMBEDDER",
            "CTXADMIN_EMBEDDING_DIMENSION",
            "CTXADMIN_EMBEDDER_CONNECTION",
            "CTXADMIN_EMBEDDER_MODEL",
        ):
            if hasattr(settings, name):
                delattr(settings, name)
        embedder = embedder_from_settings()
        assert isinstance(embedder, HashingEmbedder)
        assert embedder.name == "hashing-v2-384"
        assert embedder_from_settings() is embedder


def test_hashing_dimension_from_settings():
    with override_settings(CTXADMIN_EMBEDDER="hashing", CTXADMIN_EMBEDDING_DIMENSION=64):
        assert embedder_from_settings().name == "hashing-v2-64"


def test_openai_compatible_from_settings(monkeypatch):
    monkeypatch.setenv("CTXADMIN_TEST_EMBED_KEY", KEY)
    with override_settings(
        CTXADMIN_EMBEDDER="openai_compatible",
        CTXADMIN_PROVIDERS=PROVIDERS,
        CTXADMIN_EMBEDDER_CONNECTION="emb-openai",
        CTXADMIN_EMBEDDER_MODEL="nomic-embed-text",
        CTXADMIN_EMBEDDING_DIMENSION=768,
    ):
        embedder = embedder_from_settings()
        assert isinstance(embedder, OpenAICompatibleEmbedder)
        assert embedder.name == "openai_compatible:nomic-embed-text"
        assert embedder.dimension == 768
        assert embedder.connection.api_key == KEY
        assert embedder.request_dimensions is False
        assert embedder.remote is True
        monkeypatch.setenv("CTXADMIN_TEST_EMBED_KEY", "sk-rotated")
        assert embedder_from_settings().connection.api_key == "sk-rotated"
        with override_settings(CTXADMIN_EMBEDDER_REQUEST_DIMENSIONS=True):
            assert embedder_from_settings().request_dimensions is True


def test_gemini_from_settings():
    with override_settings(
        CTXADMIN_EMBEDDER="gemini",
        CTXADMIN_PROVIDERS=PROVIDERS,
        CTXADMIN_EMBEDDER_CONNECTION="emb-gemini",
        CTXADMIN_EMBEDDER_MODEL="gemini-embedding-001",
        CTXADMIN_EMBEDDING_DIMENSION=384,
    ):
        embedder = embedder_from_settings()
        assert isinstance(embedder, GeminiEmbedder)
        assert (embedder.name, embedder.dimension, embedder.max_batch) == (
            "gemini:gemini-embedding-001",
            384,
            100,
        )


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"CTXADMIN_EMBEDDER": "word2vec"}, "CTXADMIN_EMBEDDER must be one of"),
        ({"CTXADMIN_EMBEDDING_DIMENSION": 1}, "CTXADMIN_EMBEDDING_DIMENSION"),
        ({"CTXADMIN_EMBEDDING_DIMENSION": "384"}, "CTXADMIN_EMBEDDING_DIMENSION"),
        (
            {"CTXADMIN_EMBEDDER": "openai_compatible", "CTXADMIN_EMBEDDER_MODEL": "m"},
            "needs CTXADMIN_EMBEDDER_CONNECTION",
        ),
        (
            {"CTXADMIN_EMBEDDER": "gemini", "CTXADMIN_EMBEDDER_CONNECTION": "emb-gemini"},
            "CTXADMIN_EMBEDDER_MODEL",
        ),
        (
            {
                "CTXADMIN_EMBEDDER": "gemini",
                "CTXADMIN_EMBEDDER_CONNECTION": "missing",
                "CTXADMIN_EMBEDDER_MODEL": "m",
            },
            "no provider connection named 'missing'",
        ),
        (
            {
                "CTXADMIN_EMBEDDER": "gemini",
                "CTXADMIN_EMBEDDER_CONNECTION": "emb-openai",
                "CTXADMIN_EMBEDDER_MODEL": "m",
            },
            "is a openai_compatible connection",
        ),
        (
            {
                "CTXADMIN_EMBEDDER": "openai_compatible",
                "CTXADMIN_EMBEDDER_CONNECTION": "emb-openai",
                "CTXADMIN_EMBEDDER_MODEL": "m" * 101,
            },
            "CTXADMIN_EMBEDDER_MODEL",
        ),
        (
            {"CTXADMIN_EMBEDDER": "local", "CTXADMIN_EMBEDDING_DIMENSION": 768},
            "makes 384-dimension vectors",
        ),
    ],
)
def test_unusable_settings_are_improperly_configured(overrides, message):
    settings = {
        "CTXADMIN_EMBEDDER": "hashing",
        "CTXADMIN_EMBEDDING_DIMENSION": 384,
        "CTXADMIN_EMBEDDER_CONNECTION": "",
        "CTXADMIN_EMBEDDER_MODEL": "",
        "CTXADMIN_PROVIDERS": PROVIDERS,
        **overrides,
    }
    with override_settings(**settings), pytest.raises(ImproperlyConfigured) as caught:
        embedder_from_settings()
    assert message in str(caught.value)
    assert "127.0.0.1" not in str(caught.value)


def _configured_embedder(env: dict) -> str:
    import os
    import subprocess
    import sys

    code = "import django; django.setup(); from django.conf import settings; "
    code += "print(settings.CTXADMIN_EMBEDDER)"
    answer = subprocess.run(
        [sys.executable, "-c", code],
        env={**{k: v for k, v in os.environ.items() if k != "CTXADMIN_EMBEDDER"}, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return answer.stdout.strip().splitlines()[-1]


def test_unset_the_embedder_is_the_local_model_where_it_is_installed():
    from importlib.util import find_spec

    assert find_spec("onnxruntime") is not None  # make test installs the extra `local`
    assert _configured_embedder({"DJANGO_SETTINGS_MODULE": "config.settings"}) == "local"
    assert _configured_embedder({"CTXADMIN_EMBEDDER": "hashing"}) == "hashing"


@pytest.mark.django_db
def test_memories_of_another_model_are_named_by_a_warning(owner):
    from django.core.checks import run_checks

    from memory.models import MemoryEntry

    def named() -> list:
        return [w for w in run_checks(databases=["default"]) if w.id == "ctxadmin.W006"]

    for text in ("tea at five", "coffee at nine"):
        added = owner.client().post(
            "/api/v1/apps/acme/users/u/memories", {"content": text}, format="json"
        )
        assert added.status_code == 201, added.content
    assert MemoryEntry.objects.filter(embedding__isnull=False).count() == 2
    assert named() == []
    MemoryEntry.objects.filter(content="tea at five").update(embedding_model="hashing-v1-384")
    warnings = named()
    assert len(warnings) == 1 and warnings[0].msg.startswith("1 memories")
    # Without the database, the check does not run.
    assert all(w.id != "ctxadmin.W006" for w in run_checks())
