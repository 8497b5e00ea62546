"""Each ``pip install ./clients/python[...]`` line of the README, in a fresh venv of its own (no
system site packages, nothing of the project's venv): the line installs, every import of the
README's and docs/mcp.md's Python snippets that the line's extras provide imports, and the
first snippet after the line runs there against a live stack (the OpenAI Agents one on a
local Responses API server, as in test_snippets.py). pip's cache makes repeats quick."""

from __future__ import annotations

import ast
import os
import re
import shlex
import subprocess
import sys

import pytest
from readme_snippets import FIRST_START_SCOPES, ROOT, Snippet, localize, snippets

pytestmark = pytest.mark.e2e

# The extra that provides the modules under each name; the rest (the standard library,
# ctxadmin_client itself) the client alone provides.
PROVIDED_BY = {
    "ctxadmin_client.adk": "adk",
    "google": "adk",
    "ctxadmin_client.openai_agents": "openai-agents",
    "agents": "openai-agents",
    "ctxadmin_client.langgraph": "langgraph",
    "langgraph": "langgraph",
}


def provider(module: str) -> str:
    """The extra that provides ``module`` ('' for none)."""
    for name, extra in PROVIDED_BY.items():
        if module == name or module.startswith(f"{name}."):
            return extra
    return ""


def install_lines() -> list[tuple[Snippet, str, Snippet]]:
    """Each install snippet of the README: the snippet, its pip argument, and the first Python
    snippet run after it."""
    readme = snippets("README.md")
    found = []
    for index, snippet in enumerate(readme):
        if snippet.kind != "install":
            continue
        line = next(line for line in snippet.code.splitlines() if line.startswith("pip install"))
        (argument,) = shlex.split(line.split("#", 1)[0])[2:]
        follower = next(
            later
            for later in readme[index + 1 :]
            if later.kind == "run" and later.language == "python"
        )
        found.append((snippet, argument, follower))
    return found


def extras(argument: str) -> set[str]:
    named = re.fullmatch(r"\./clients/python(?:\[(?P<extras>[\w,-]+)\])?", argument)
    assert named, f"an install line of another package: {argument}"
    return set((named.group("extras") or "").split(",")) - {""}


def snippet_imports() -> list[tuple[str, str]]:
    """Each import statement of the Python snippets, with the extra it needs ('' for none)."""
    found = {}
    for source in ("README.md", "docs/mcp.md"):
        for snippet in snippets(source):
            if snippet.language != "python":
                continue
            for node in ast.walk(ast.parse(snippet.code)):
                if isinstance(node, ast.ImportFrom):
                    found[ast.unparse(node)] = provider(node.module or "")
                elif isinstance(node, ast.Import):
                    for alias in node.names:
                        found[f"import {alias.name}"] = provider(alias.name)
    return sorted(found.items())


def fresh_env(venv, **extra: str) -> dict[str, str]:
    """This environment (pip's configuration and cache with it) with nothing of the project's
    Python: no PYTHONPATH, no active venv, the fresh venv first on PATH."""
    kept = {
        name: value
        for name, value in os.environ.items()
        if name not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")
        and not name.startswith(("CTXADMIN_", "OPENAI_"))
    }
    return {**kept, "PATH": f"{venv / 'bin'}:/usr/bin:/bin", **extra}


def run(command: list[str], env: dict[str, str], timeout: float = 600) -> str:
    done = subprocess.run(
        command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert done.returncode == 0, (
        f"`{' '.join(command)}` exited {done.returncode}:\n{done.stdout[-6000:]}\n"
        f"{done.stderr[-6000:]}"
    )
    return done.stdout


def test_the_readme_has_one_install_line_per_extra():
    arguments = [argument for _snippet, argument, _follower in install_lines()]
    assert len(arguments) == len(set(arguments)), arguments
    assert {frozenset(extras(argument)) for argument in arguments} == {
        frozenset(),
        frozenset({"adk"}),
        frozenset({"openai-agents"}),
        frozenset({"langgraph"}),
    }


def test_the_adk_line_is_checked_with_adks_mcp_toolset():
    mcp_toolset = [
        extra for line, extra in snippet_imports() if "google.adk.tools.mcp_tool" in line
    ]
    assert mcp_toolset and set(mcp_toolset) == {"adk"}


@pytest.mark.parametrize(
    "install", install_lines(), ids=lambda install: install[1].removeprefix("./clients/")
)
def test_an_install_line_works_in_a_fresh_venv(install, make_app, responses_server, tmp_path):
    _snippet, argument, follower = install
    venv = tmp_path / "venv"
    env = fresh_env(venv)
    run([sys.executable, "-m", "venv", str(venv)], env, timeout=120)
    python = str(venv / "bin" / "python")
    run([python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", argument], env)
    located = run([python, "-c", "import ctxadmin_client; print(ctxadmin_client.__file__)"], env)
    assert located.startswith(str(venv)), located

    provided = extras(argument) | {""}
    imports = [line for line, extra in snippet_imports() if extra in provided]
    run([python, "-c", "\n".join(imports)], env, timeout=300)

    app = make_app(scopes=FIRST_START_SCOPES)
    script = tmp_path / "snippet.py"
    script.write_text(localize(follower.code, app.base_url, app.key, app.name))
    env = fresh_env(
        venv,
        CTXADMIN_URL=app.base_url,
        CTXADMIN_API_KEY=app.key,
        OPENAI_BASE_URL=responses_server.url,
        OPENAI_API_KEY="sk-local",
        OPENAI_AGENTS_DISABLE_TRACING="1",
    )
    run([python, str(script)], env, timeout=300)
