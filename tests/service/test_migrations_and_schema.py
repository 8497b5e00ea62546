from __future__ import annotations

import subprocess
import sys
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command

from ctxadmin import stack

SNAPSHOT = Path(stack.PROJECT_DIR) / "docs" / "openapi.yaml"


@pytest.mark.django_db
def test_no_missing_migrations():
    out = StringIO()
    try:
        call_command("makemigrations", "--check", "--dry-run", stdout=out, stderr=out)
    except SystemExit as exc:  # makemigrations --check exits 1 when a migration is missing
        pytest.fail(f"missing migrations:\n{out.getvalue()} ({exc})")


def test_committed_openapi_schema_is_current(tmp_path):
    """Regenerate with `make schema` when the API changes."""
    generated = tmp_path / "openapi.yaml"
    result = subprocess.run(
        [
            sys.executable,
            "manage.py",
            "spectacular",
            "--validate",
            "--fail-on-warn",
            "--file",
            str(generated),
        ],
        cwd=stack.PROJECT_DIR,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert generated.read_text() == SNAPSHOT.read_text(), (
        "docs/openapi.yaml is stale: run `make schema`"
    )


def test_schema_is_served(client):
    response = client.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert response.status_code == 200
    document = response.json()
    assert document["openapi"].startswith("3.")
    assert "/api/v1/apps/{app}/" in document["paths"]
    docs = client.get("/api/docs/")
    assert docs.status_code == 200
    assert b"swagger-ui" in docs.content
    assert b"cdn.jsdelivr" not in docs.content
