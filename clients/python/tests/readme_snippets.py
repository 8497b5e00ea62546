"""The fenced snippets of the documentation, found by the marker on the line before each:
``<!-- snippet -->`` (or ``<!-- snippet: a note on how it runs -->``) is run, ``<!-- snippet:
skip, why -->`` is not, ``<!-- snippet: install -->`` is a ``pip install`` line that the
fresh-venv test runs, and ``<!-- snippet: continues the one above -->`` is one program with
the snippet before it. Each snippet is written for ``make run``'s first start; ``localize``
puts a test stack's address, key and app in its place."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
# The scopes of the key make run's first start prints: every one.
FIRST_START_SCOPES = ("sessions", "memory", "cache", "diagnostics", "admin", "delegate")
MARKER = re.compile(r"<!-- snippet(?::\s*(?P<note>.*?))?\s*-->")
FENCE = re.compile(r"```(?P<language>\w+)$")


@dataclass(frozen=True)
class Snippet:
    source: str
    line: int
    language: str
    note: str
    code: str

    @property
    def kind(self) -> str:
        """``run``, ``skip``, ``install`` or ``continues``."""
        for kind in ("skip", "install", "continues"):
            if self.note.startswith(kind):
                return kind
        return "run"

    @property
    def where(self) -> str:
        return f"{self.source}:{self.line}"


def fences(source: str) -> list[tuple[int, str, str | None, str]]:
    """Every fenced block of ``source`` with a language: (line, language, marker note or None
    when unmarked, code)."""
    lines = (ROOT / source).read_text(encoding="utf-8").splitlines()
    found, index = [], 0
    while index < len(lines):
        opening = FENCE.fullmatch(lines[index])
        if lines[index].startswith("```") and not opening:
            index = lines.index("```", index + 1) + 1  # an unlabelled block: skip it whole
            continue
        if opening:
            end = lines.index("```", index + 1)
            marker = MARKER.fullmatch(lines[index - 1]) if index else None
            note = (marker.group("note") or "") if marker else None
            code = "\n".join(lines[index + 1 : end]) + "\n"
            found.append((index + 1, opening.group("language"), note, code))
            index = end
        index += 1
    return found


def snippets(source: str) -> list[Snippet]:
    """The marked snippets of ``source`` in order; a ``continues`` snippet is joined to the
    one before it."""
    joined: list[Snippet] = []
    for line, language, note, code in fences(source):
        if note is None:
            continue
        snippet = Snippet(source, line, language, note, code)
        if snippet.kind == "continues":
            before = joined.pop()
            snippet = Snippet(source, before.line, language, before.note, before.code + code)
        joined.append(snippet)
    return joined


def localize(code: str, base_url: str, key: str, app: str) -> str:
    """The snippet with a test stack's address, key and app in place of make run's."""
    code = code.replace("http://127.0.0.1:8000", base_url).replace("ctx_...", key)
    return re.sub(r"\bdemo\b", app, code)
