"""The API documentation reads for people: every operation has a one-line summary, and the
main operations show realistic examples (which the API itself accepts and answers in the
same shape) instead of values generated from the schema's patterns."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from drf_spectacular.generators import SchemaGenerator

from tests.conftest import make_tenant

SCHEMA = Path(__file__).resolve().parents[2] / "docs" / "openapi.yaml"
USER = "/api/v1/apps/{app}/users/{user}"

#: The main operations, in an order in which their examples follow one another, with the
#: status each example answers.
MAIN = [
    ("sessions_create", "post", f"{USER}/sessions", "201"),
    ("events_append", "post", f"{USER}/sessions/{{sid}}/events", "201"),
    ("sessions_get", "get", f"{USER}/sessions/{{sid}}", "200"),
    ("context_build", "post", f"{USER}/sessions/{{sid}}/context", "200"),
    ("memories_add", "post", f"{USER}/memories", "201"),
    ("memories_search", "post", f"{USER}/memories/search", "200"),
    ("invocations_run", "post", f"{USER}/sessions/{{sid}}/invocations", "201"),
    ("memories_ingestions_admit", "post", f"{USER}/memories/ingestions", "202"),
    ("api_keys_create", "post", "/api/v1/apps/{app}/keys", "201"),
    ("api_keys_list", "get", "/api/v1/apps/{app}/keys", "200"),
]


def _operations(document: dict):
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            yield path, method, operation


def _example(media: dict):
    examples = media.get("examples") or {}
    assert len(examples) == 1, media
    return next(iter(examples.values()))["value"]


def test_every_operation_has_a_one_line_summary():
    document = SchemaGenerator().get_schema(request=None, public=True)
    summaries = []
    for path, method, operation in _operations(document):
        summary = operation.get("summary", "")
        assert summary, (method, path)
        assert "\n" not in summary and len(summary) <= 80, summary
        assert not summary.endswith("."), summary
        summaries.append(summary)
    assert len(set(summaries)) == len(summaries)  # each says what its own operation does


def test_the_committed_schema_carries_the_summaries_and_examples():
    document = yaml.safe_load(SCHEMA.read_text())
    by_id = {op["operationId"]: op for _path, _method, op in _operations(document)}
    for operation_id, method, path, status in MAIN:
        operation = document["paths"][path][method]
        assert operation["operationId"] == operation_id and operation["summary"]
        if method == "post" and "requestBody" in operation:
            _example(operation["requestBody"]["content"]["application/json"])
        _example(operation["responses"][status]["content"]["application/json"])
    assert all(op.get("summary") for op in by_id.values())


@pytest.mark.django_db(transaction=True)
def test_the_examples_are_what_the_api_accepts_and_answers(monkeypatch):
    from memory.tasks import drain_outbox, embed_pending
    from sessions_app.tasks import run_compaction

    for task in (drain_outbox, embed_pending, run_compaction):
        monkeypatch.setattr(task, "delay_on_commit", lambda *a, **k: None)
    document = yaml.safe_load(SCHEMA.read_text())
    client = make_tenant("demo").client()
    for operation_id, method, path, status in MAIN:
        operation = document["paths"][path][method]
        url = path.format(app="demo", user="alice", sid="s1")
        if "requestBody" in operation:
            body = _example(operation["requestBody"]["content"]["application/json"])
            answer = getattr(client, method)(url, body, format="json")
        else:
            answer = getattr(client, method)(url)
        assert str(answer.status_code) == status, (operation_id, answer.content[:500])
        shown = _example(operation["responses"][status]["content"]["application/json"])
        got = answer.json()
        assert set(got) == set(shown), operation_id
        for key in ("results", "events", "hits"):
            if isinstance(shown.get(key), list) and shown[key]:
                assert set(got[key][0]) == set(shown[key][0]), (operation_id, key)
