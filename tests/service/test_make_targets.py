"""The two commands install what they need and say so: ``make run`` the service and its
offline embedder only, ``make test`` the test tools, the Python client and the frameworks it
plugs into as well. Read from ``make``'s own dry run of a fresh checkout (``-B``: as if
nothing were installed)."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from ctxadmin import stack

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")


def _dry_run(target: str) -> list[str]:
    done = subprocess.run(
        ["make", "-n", "-B", target, "VENV=/nonexistent-venv"],
        cwd=stack.PROJECT_DIR,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.splitlines()


def _installs(lines: list[str]) -> list[str]:
    return [m.group(1) for line in lines for m in re.finditer(r"pip install .*?-e '([^']+)'", line)]


def test_make_run_installs_the_service_alone_and_says_so():
    lines = _dry_run("run")
    assert _installs(lines) == [".[local]"]
    assert any(line.startswith("echo ") and "Installing ctxadmin" in line for line in lines)
    assert not any("clients/python" in line or "[dev" in line for line in lines)


def test_make_test_adds_the_test_tools_the_client_and_the_frameworks():
    installs = _installs(_dry_run("test"))
    assert installs[0] == ".[local]"
    assert ".[dev,local]" in installs
    assert "clients/python[adk,openai-agents,langgraph]" in installs
