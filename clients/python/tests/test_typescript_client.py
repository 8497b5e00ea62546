"""The TypeScript client (clients/typescript) against the live stack: ``npm ci`` and
``npm run build`` make its ES module and CommonJS builds, then Node's test runner runs its
tests (test/*.test.*) with the stack's address and a key of a fresh app. Its own tests
check the round trip, the typed errors, retries, pagination, both builds, and that its
generated types are those of docs/openapi.yaml."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from ctxadmin import stack

pytestmark = pytest.mark.e2e

PACKAGE = Path(stack.PROJECT_DIR) / "clients" / "typescript"


def run(command: list[str], env: dict[str, str], timeout: float) -> None:
    result = subprocess.run(
        command, cwd=PACKAGE, env=env, capture_output=True, text=True, timeout=timeout
    )
    assert result.returncode == 0, (
        f"`{' '.join(command)}` in clients/typescript exited {result.returncode}:\n"
        f"{result.stdout[-12000:]}\n{result.stderr[-6000:]}"
    )


def test_the_typescript_client_passes_its_tests_against_the_stack(make_app):
    missing = [tool for tool in ("node", "npm") if shutil.which(tool) is None]
    assert not missing, (
        f"{' and '.join(missing)} not found: the TypeScript client's tests need Node 20 or "
        "later and npm on PATH"
    )
    app = make_app()
    env = {
        **os.environ,
        "CTXADMIN_URL": app.base_url,
        "CTXADMIN_API_KEY": app.key,
        "CTXADMIN_APP": app.name,
        "NO_COLOR": "1",
    }
    run(["npm", "ci", "--prefer-offline", "--no-audit", "--no-fund"], env, timeout=300)
    run(["npm", "run", "build"], env, timeout=120)
    run(["npm", "test"], env, timeout=180)
