"""Every snippet of the README and of docs/mcp.md, run in the order it appears after the
quickstart against a live stack, as a reader pasting them into one shell would: shell
snippets with bash (what one sets, the next has), Python ones as scripts of their own with the
shell's environment, TypeScript ones compiled by the TypeScript client's own tsc (strict, as
the package builds) and run by Node. Each has this stack's address, key and app in place of
make run's (``readme_snippets.localize``). The OpenAI Agents snippet's model is a local server
speaking OpenAI's Responses API, named by OPENAI_BASE_URL as the SDK reads it. A snippet that
fails fails the test with its output; a fenced block with no marker fails it too."""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from readme_snippets import FIRST_START_SCOPES, ROOT, Snippet, fences, localize, snippets

pytestmark = pytest.mark.e2e

DOCUMENTS = ("README.md", "docs/mcp.md", "clients/typescript/README.md")
TYPESCRIPT = ROOT / "clients" / "typescript"
SNIPPETS_DIR = TYPESCRIPT / "dist" / "snippets"
# Node's `process` as @types/node declares what the snippets read of it (the package itself
# has no dependency on @types/node).
NODE_GLOBALS = "declare const process: { env: Record<string, string | undefined> };\n"


def test_every_fenced_block_is_marked():
    unmarked = [
        f"{source}:{line}"
        for source in DOCUMENTS
        for line, _language, note, _code in fences(source)
        if note is None
    ]
    assert not unmarked, f"fenced blocks with no <!-- snippet --> marker: {unmarked}"


# ---------------------------------------------------------------- one reader's shell


class Shell:
    """What a reader's shell holds between snippets: its exported variables, on a PATH whose
    ``python`` is this one (the client installed in it)."""

    def __init__(self, work: Path, extra: dict[str, str]) -> None:
        self.work = work
        inherited = {
            name: value
            for name, value in os.environ.items()
            if not name.startswith(("CTXADMIN_", "OPENAI_", "GOOGLE_", "GEMINI_"))
        }
        path = os.pathsep.join([str(Path(sys.executable).parent), "/usr/bin", "/bin"])
        self.env = {**inherited, "PATH": path, "NO_COLOR": "1", **extra}
        self.outputs: list[tuple[Snippet, str]] = []

    def run(self, snippet: Snippet, base_url: str, key: str, app: str) -> str:
        code = localize(snippet.code, base_url, key, app)
        if snippet.language == "sh":
            output = self._bash(snippet, code)
        elif snippet.language == "python":
            output = self._python(snippet, code)
        elif snippet.language == "ts":
            output = self._node(snippet, code)
        else:
            raise AssertionError(f"{snippet.where}: no way to run a {snippet.language} snippet")
        self.outputs.append((snippet, output))
        return output

    def _check(self, snippet: Snippet, done: subprocess.CompletedProcess) -> str:
        assert done.returncode == 0, (
            f"the snippet at {snippet.where} exited {done.returncode}:\n"
            f"{done.stdout[-8000:]}\n{done.stderr[-8000:]}"
        )
        return done.stdout

    def _bash(self, snippet: Snippet, code: str) -> str:
        state = self.work / "shell.env"
        # Every assignment exported (set -a), as one interactive shell keeps them all.
        script = f"set -a\n{code}\nset +a\nenv -0 > {state}\n"
        done = subprocess.run(
            ["bash", "-e", "-o", "pipefail", "-c", script],
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        output = self._check(snippet, done)
        kept = dict(item.split("=", 1) for item in state.read_text().split("\0") if "=" in item)
        for name in ("PWD", "OLDPWD", "SHLVL", "_"):
            kept.pop(name, None)
        self.env = kept
        return output

    def _python(self, snippet: Snippet, code: str) -> str:
        script = self.work / f"{Path(snippet.source).stem}-{snippet.line}.py"
        script.write_text(code, encoding="utf-8")
        done = subprocess.run(
            [sys.executable, str(script)],
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
        return self._check(snippet, done)

    def _node(self, snippet: Snippet, code: str) -> str:
        compiled = compile_typescript({snippet.where: code})[snippet.where]
        done = subprocess.run(
            ["node", str(compiled)],
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        return self._check(snippet, done)


def compile_typescript(sources: dict[str, str]) -> dict[str, Path]:
    """Compiles each source as an ES module of its own with the TypeScript client's tsc and
    its tsconfig (strict), inside the package so that ``ctxadmin-client`` names it; answers
    each one's JavaScript. A type error fails with tsc's output."""
    tsc = TYPESCRIPT / "node_modules" / "typescript" / "bin" / "tsc"
    assert tsc.exists(), "clients/typescript has no node_modules: run npm ci there"
    shutil.rmtree(SNIPPETS_DIR, ignore_errors=True)
    SNIPPETS_DIR.mkdir(parents=True)
    (SNIPPETS_DIR / "node-globals.d.ts").write_text(NODE_GLOBALS)
    names = {}
    for index, (where, code) in enumerate(sources.items()):
        names[where] = f"snippet-{index}"
        (SNIPPETS_DIR / f"snippet-{index}.mts").write_text(f"// {where}\n{code}")
    config = {
        "extends": "../../tsconfig.json",
        "compilerOptions": {"rootDir": ".", "outDir": "out", "declaration": False},
        "include": ["*.mts", "node-globals.d.ts"],
    }
    (SNIPPETS_DIR / "tsconfig.json").write_text(json.dumps(config))
    done = subprocess.run(
        ["node", str(tsc), "-p", str(SNIPPETS_DIR)],
        cwd=TYPESCRIPT,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    listing = "\n".join(f"{name}: {where}" for where, name in names.items())
    assert done.returncode == 0, f"tsc refused a snippet:\n{done.stdout}{done.stderr}\n{listing}"
    return {where: SNIPPETS_DIR / "out" / f"{name}.mjs" for where, name in names.items()}


def _quickstart(readme: list[Snippet]) -> list[Snippet]:
    """The README's snippets up to and including the quickstart block."""
    end = next(i for i, snippet in enumerate(readme) if snippet.note.startswith("the quickstart"))
    return readme[: end + 1]


def _runnable(found: list[Snippet]) -> list[Snippet]:
    return [snippet for snippet in found if snippet.kind == "run"]


@pytest.fixture
def shell(tmp_path, responses_server) -> Shell:
    return Shell(
        tmp_path,
        {
            "OPENAI_BASE_URL": responses_server.url,
            "OPENAI_API_KEY": "sk-local",
            "OPENAI_AGENTS_DISABLE_TRACING": "1",
        },
    )


def test_the_readme_snippets_run_in_order(make_app, shell, responses_server):
    app = make_app(scopes=FIRST_START_SCOPES)
    readme = _runnable(snippets("README.md"))
    for snippet in readme:
        shell.run(snippet, app.base_url, app.key, app.name)
    assert shell.env["CTXADMIN_URL"] == app.base_url
    assert shell.env["CTXADMIN_TOKEN"].startswith("ctt_")
    printed = {snippet.where: output for snippet, output in shell.outputs}
    typescript = [snippet.where for snippet in readme if snippet.language == "ts"]
    assert "Alice prefers window seats" in printed[typescript[0]]
    # The Agents SDK's second turn reached the model with the first, read from ctxadmin.
    _first, second = responses_server.inputs
    assert "Book me a window seat to Lisbon" in json.dumps(second)
    assert "Answer 1." in json.dumps(second)
    assert "Answer 2." in "".join(printed.values())


def test_the_mcp_snippets_run_in_order_after_the_quickstart(make_app, shell):
    app = make_app(scopes=FIRST_START_SCOPES)
    for snippet in _runnable(_quickstart(snippets("README.md")) + snippets("docs/mcp.md")):
        shell.run(snippet, app.base_url, app.key, app.name)
    printed = [output for snippet, output in shell.outputs if snippet.source == "docs/mcp.md"]
    whoami, adk_tools, agents_tools = printed[-3:]
    assert "'user_id': 'alice'" in whoami
    # A user token's agent sees the tools of its capabilities, and no others.
    assert sorted(ast.literal_eval(adk_tools)) == ["memory_add", "memory_search"]
    name, tools = agents_tools.split(" ", 1)
    assert name == "assistant"
    # Unfiltered, it sees the history too: a read its memory_search capability allows.
    assert sorted(ast.literal_eval(tools)) == ["memory_add", "memory_history", "memory_search"]


def test_the_typescript_readme_snippets_compile_and_run(make_app, shell):
    app = make_app(scopes=FIRST_START_SCOPES)
    build = next(snippet for snippet in snippets("README.md") if "npm run build" in snippet.code)
    shell.run(build, app.base_url, app.key, app.name)
    shell.env.update(CTXADMIN_URL=app.base_url, CTXADMIN_API_KEY=app.key)
    for snippet in _runnable(snippets("clients/typescript/README.md")):
        assert snippet.language == "ts", snippet.where
        output = shell.run(snippet, app.base_url, app.key, app.name)
        assert output.strip(), f"{snippet.where} printed nothing"
