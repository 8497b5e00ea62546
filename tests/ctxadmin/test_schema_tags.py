"""The API documentation groups every operation under one of its topics."""

from __future__ import annotations

from pathlib import Path

import yaml

from ctxadmin.api.tags import TAGS, tag_for

SCHEMA = Path(__file__).resolve().parents[2] / "docs" / "openapi.yaml"


def test_every_operation_has_one_documented_tag():
    document = yaml.safe_load(SCHEMA.read_text())
    names = [tag["name"] for tag in document["tags"]]
    assert names == [tag["name"] for tag in TAGS]
    used = set()
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            if method == "parameters":
                continue
            assert len(operation["tags"]) == 1 and operation["tags"][0] in names, (method, path)
            used.add(operation["tags"][0])
    assert used == set(names)


def test_paths_fall_in_their_topics():
    user = "/api/v1/apps/{app}/users/{user}"
    assert tag_for(f"{user}/sessions/{{sid}}/events") == "events"
    assert tag_for(f"{user}/sessions/{{sid}}") == "sessions"
    assert tag_for(f"{user}/memories/ingestions") == "outbox"
    assert tag_for(f"{user}/memories/search") == "memory"
    assert tag_for("/api/v1/apps/{app}/keys/{prefix}/rotate") == "keys"
    assert tag_for("/api/v1/apps/{app}/") == "diagnostics"
