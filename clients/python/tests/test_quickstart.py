"""The README's quickstart, run against a live stack: the curl block exactly as printed (its
KEY and CTX set as the README's first block sets them, for an app of this stack), then the
Python client's lines (with this stack's address and app in place of make run's)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

README = Path(__file__).resolve().parents[3] / "README.md"


def _block(pattern: str) -> str:
    found = re.search(pattern, README.read_text(encoding="utf-8"), re.S)
    assert found, f"the README has no block matching {pattern!r}"
    return found.group(1)


def test_the_curl_quickstart_works_as_printed(make_app):
    if shutil.which("curl") is None:
        pytest.skip("needs curl")
    app = make_app()
    script = _block(r"<!-- quickstart:[^\n]*-->\n```sh\n(.*?)```\n<!-- /quickstart -->")
    done = subprocess.run(
        ["bash", "-e", "-c", script],
        env={
            "PATH": "/usr/bin:/bin",
            "KEY": app.key,
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


def test_the_python_quickstart_works(make_app):
    app = make_app()
    code = _block(r"The same with the Python client.*?```python\n(.*?)```")
    code = code.replace("http://127.0.0.1:8000", app.base_url).replace('"demo"', repr(app.name))
    printed = []
    exec(code, {"KEY": app.key, "print": printed.append})  # noqa: S102 - the README's own lines
    assert printed and printed[0][0]["content"] == "Alice prefers window seats"
