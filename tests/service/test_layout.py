"""The plan of the house, checked: no import cycle between the project's modules, no module
over 600 lines, every folder of code a regular package. (The layers and the forbidden imports
are import-linter's contracts in pyproject.toml, which `make lint` checks.)"""

from __future__ import annotations

from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("config", "ctxadmin", "sessions_app", "memory", "caching", "runner", "console", "bench")
MAX_LINES = 600
# Test fakes stand in for whole provider APIs; migrations are generated history.
EXEMPT = ("migrations",)
EXEMPT_FAKES = ("ctxadmin/testing/fake_",)


def _cycles(graph) -> list[list[str]]:
    """The import graph's strongly connected components of more than one module (Tarjan,
    iteratively: the graph has hundreds of modules)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append(
                        (child, iter(sorted(graph.find_modules_directly_imported_by(child))))
                    )
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_cycle_finder_finds_a_cycle():
    graph = grimp.ImportGraph()
    for name in ("a", "a.x", "a.y", "a.z"):
        graph.add_module(name)
    graph.add_import(importer="a.x", imported="a.y")
    graph.add_import(importer="a.y", imported="a.x")
    graph.add_import(importer="a.y", imported="a.z")
    assert _cycles(graph) == [["a.x", "a.y"]]


def test_no_import_cycle_between_the_projects_modules():
    """Every import counts, those inside function bodies too."""
    graph = grimp.build_graph(*PACKAGES, include_external_packages=False)
    # A package's __init__ importing its own modules is how a package is made; an edge from
    # a module to its own package's __init__ is not a circle of concerns.
    for module in list(graph.modules):
        for imported in graph.find_modules_directly_imported_by(module):
            if module.startswith(imported + "."):
                graph.remove_import(importer=module, imported=imported)
    assert _cycles(graph) == []


def _code_files():
    for package in (*PACKAGES, "tests"):
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            if any(part in EXEMPT for part in path.parts):
                continue
            if relative.startswith(EXEMPT_FAKES):
                continue
            yield relative, path


def test_no_module_is_over_600_lines():
    long = {
        relative: lines
        for relative, path in _code_files()
        if (lines := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}


def test_every_folder_of_code_is_a_regular_package():
    missing = sorted(
        path.parent.relative_to(ROOT).as_posix()
        for _relative, path in _code_files()
        if not (path.parent / "__init__.py").exists()
    )
    assert missing == []
