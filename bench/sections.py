"""``BENCHMARKS.md``, and replacing one of its sections, for the benchmarks that can run alone."""

from __future__ import annotations

from pathlib import Path

REPORT = Path(__file__).resolve().parent / "BENCHMARKS.md"


def splice(text: str, section: str, heading: str) -> str:
    """``text`` with the section starting at ``heading`` replaced by ``section`` (appended
    when there is none); the section ends where the next ``## `` heading begins."""
    start = text.find(heading)
    if start < 0:
        return text.rstrip() + "\n\n" + section
    end = text.find("\n## ", start + len(heading))
    return text[:start] + section.rstrip() + "\n" + ("" if end < 0 else text[end:])
