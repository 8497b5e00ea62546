"""Replacing one section of ``BENCHMARKS.md``, for the benchmarks that can run alone."""

from __future__ import annotations


def splice(text: str, section: str, heading: str) -> str:
    """``text`` with the section starting at ``heading`` replaced by ``section`` (appended
    when there is none); the section ends where the next ``## `` heading begins."""
    start = text.find(heading)
    if start < 0:
        return text.rstrip() + "\n\n" + section
    end = text.find("\n## ", start + len(heading))
    return text[:start] + section.rstrip() + "\n" + ("" if end < 0 else text[end:])
