"""A client generated from the committed schema (docs/openapi.yaml) by openapi-python-client
works: the generator keeps every schema and operation, the package imports, and a session's
create, append, context and memory search round trip runs through it against the live stack.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ctxadmin import stack

pytestmark = pytest.mark.e2e

SCHEMA = Path(stack.PROJECT_DIR) / "docs" / "openapi.yaml"
PACKAGE = "ctxadmin_generated"


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("generated-client")
    config = root / "config.yaml"
    # No post hooks: formatting the output is not what is tested.
    config.write_text(f"package_name_override: {PACKAGE}\npost_hooks: []\n")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "openapi_python_client",
            "generate",
            "--path",
            str(SCHEMA),
            "--config",
            str(config),
            "--meta",
            "none",
            "--output-path",
            str(root / PACKAGE),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    # Any dropped schema or response is reported as a warning; the client must be whole.
    assert "Warning" not in output, output
    for source in (root / PACKAGE).rglob("*.py"):
        compile(source.read_text(), str(source), "exec")
    sys.path.insert(0, str(root))
    try:
        yield importlib.import_module(PACKAGE)
    finally:
        sys.path.remove(str(root))
        for name in [name for name in sys.modules if name.split(".")[0] == PACKAGE]:
            del sys.modules[name]


def test_every_schema_and_operation_is_generated(generated):
    models = importlib.import_module(f"{PACKAGE}.models")
    document = yaml.safe_load(SCHEMA.read_text())
    assert [name for name in document["components"]["schemas"] if not hasattr(models, name)] == []
    package = Path(generated.__file__).parent
    operations = [
        (operation["tags"][0], operation["operationId"])
        for methods in document["paths"].values()
        for operation in methods.values()
    ]
    assert [
        (tag, name)
        for tag, name in operations
        if not (package / "api" / tag / f"{name}.py").is_file()
    ] == []


def test_a_round_trip_through_the_generated_client(generated, make_app):
    app = make_app()
    models = importlib.import_module(f"{PACKAGE}.models")
    sessions = importlib.import_module(f"{PACKAGE}.api.sessions.sessions_create")
    events = importlib.import_module(f"{PACKAGE}.api.events.events_append")
    context = importlib.import_module(f"{PACKAGE}.api.context.context_build")
    memories_add = importlib.import_module(f"{PACKAGE}.api.memory.memories_add")
    search = importlib.import_module(f"{PACKAGE}.api.memory.memories_search")
    client = generated.AuthenticatedClient(base_url=app.base_url, token=app.key)
    user = "alice"

    created = sessions.sync_detailed(
        app.name,
        user,
        client=client,
        body=models.SessionCreate.from_dict({"session_id": "s1", "state": {"topic": "trips"}}),
    )
    assert created.status_code == 201
    session = created.parsed
    assert isinstance(session, models.Session), created.content
    assert (session.session_id, session.revision) == ("s1", 0)
    assert session.state.to_dict() == {"topic": "trips"}

    event = {
        "author": "user",
        "event_id": "e1",
        "content": {"role": "user", "parts": [{"text": "Book a window seat to Lisbon"}]},
        "actions": {"state_delta": {"seat": "window"}},
    }
    appended = events.sync_detailed(
        app.name,
        user,
        "s1",
        client=client,
        body=models.AppendRequest.from_dict({"event": event, "expected_revision": 0}),
    )
    assert appended.status_code == 201
    result = appended.parsed
    assert isinstance(result, models.AppendResponse), appended.content
    assert result.created == 1 and result.revision == 1
    assert isinstance(result.events[0], models.Event)
    assert result.events[0].actions.to_dict()["state_delta"] == {"seat": "window"}

    built = context.sync_detailed(
        app.name,
        user,
        "s1",
        client=client,
        body=models.ContextRequest.from_dict(
            {"current_input": {"role": "user", "parts": [{"text": "which seat?"}]}}
        ),
    )
    assert built.status_code == 200
    response = built.parsed
    assert isinstance(response, models.ContextResponse), built.content
    history = response.envelope.history
    assert [item.to_dict()["content"]["parts"][0]["text"] for item in history] == [
        "Book a window seat to Lisbon"
    ]
    assert len(response.context_fingerprint) == 64

    added = memories_add.sync_detailed(
        app.name,
        user,
        client=client,
        body=models.MemoryCreate.from_dict({"content": "Alice prefers window seats"}),
    )
    assert added.status_code == 201, added.content
    found = search.sync_detailed(
        app.name,
        user,
        client=client,
        body=models.MemorySearch.from_dict({"query": "window seats", "mode": "lexical"}),
    )
    assert found.status_code == 200
    assert isinstance(found.parsed, models.MemorySearchResult), found.content
    assert [hit.content for hit in found.parsed.hits] == ["Alice prefers window seats"]

    replayed = events.sync_detailed(
        app.name, user, "s1", client=client, body=models.AppendRequest.from_dict({"event": event})
    )
    assert replayed.status_code == 200
    assert isinstance(replayed.parsed, models.AppendResponse), replayed.content
    assert replayed.parsed.created == 0

    stale = {"event": {**event, "event_id": "e2"}, "expected_revision": 0}
    refused = events.sync_detailed(
        app.name, user, "s1", client=client, body=models.AppendRequest.from_dict(stale)
    )
    assert refused.status_code == 409
    assert isinstance(refused.parsed, models.Error)
    assert refused.parsed.error.code == "stale_session"
