"""The README's quickstart, run against a live stack: the curl block exactly as printed (its
CTXADMIN_API_KEY and CTX set as the README's first block sets them, for an app of this stack),
then the Python client's lines (with this stack's address and app in place of make run's).
test_snippets.py runs these with every other snippet; this checks their answers."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
from readme_snippets import localize, snippets

pytestmark = pytest.mark.e2e


def _block(note: str) -> str:
    found = [snippet.code for snippet in snippets("README.md") if snippet.note.startswith(note)]
    assert found, f"the README has no snippet marked {note!r}"
    return found[0]


def test_the_curl_quickstart_works_as_printed(make_app):
    if shutil.which("curl") is None:
        pytest.skip("needs curl")
    app = make_app()
    script = _block("the quickstart")
    done = subprocess.run(
        ["bash", "-e", "-c", script],
        env={
            "PATH": "/usr/bin:/bin",
            "CTXADMIN_API_KEY": app.key,
            "CTX": f"{app.base_url}/api/v1/apps/{app.name}",
        },
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    answers = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    assert len(answers) == 6
    session, appended, context, memory, found, invocation = answers
    assert session["session_id"] == "s1"
    assert [event["event_id"] for event in appended["events"]] == ["e1", "e2"]
    assert [item["event_id"] for item in context["envelope"]["history"]] == ["e1", "e2"]
    assert [hit["id"] for hit in found["hits"]] == [memory["id"]]
    assert invocation["status"] == "completed"
    assert invocation["content"]["parts"][0]["text"]
    # The first hour shows memory feeding a model call.
    assert invocation["context"]["memory_hits"] == 1, invocation["context"]


def test_the_python_quickstart_works(make_app, monkeypatch):
    app = make_app()
    quickstart = snippets("README.md")
    python = next(snippet for snippet in quickstart if snippet.language == "python")
    code = localize(python.code, app.base_url, app.key, app.name)
    monkeypatch.setenv("CTXADMIN_URL", app.base_url)
    monkeypatch.setenv("CTXADMIN_API_KEY", app.key)
    printed = []
    exec(code, {"print": printed.append})  # noqa: S102 - the README's own lines
    assert printed and printed[0][0]["content"] == "Alice prefers window seats"
