"""``BENCHMARKS.md``, and replacing one of its sections, for the benchmarks that can run alone."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from bench.machine import machine

REPORT = Path(__file__).resolve().parent / "BENCHMARKS.md"


def splice(text: str, section: str, heading: str) -> str:
    """``text`` with the section starting at ``heading`` replaced by ``section`` (appended
    when there is none); the section ends where the next ``## `` heading begins."""
    start = text.find(heading)
    if start < 0:
        return text.rstrip() + "\n\n" + section
    end = text.find("\n## ", start + len(heading))
    return text[:start] + section.rstrip() + "\n" + ("" if end < 0 else text[end:])


def run_in_process(
    command: str, heading: str, measure: Callable[[], dict], report: Callable[[dict, str], str]
) -> dict:
    """Measure in this process (no service), stamp the report with the command and the
    machine, and replace the section at ``heading``."""
    results = measure()
    box = machine()
    stamp = (
        f"Recorded by `{command}` on {datetime.now(UTC):%Y-%m-%d %H:%M} UTC ({box['cpu']}, "
        f"{box['cores']} cores, {box['memory_gib']} GiB, Python {box['python']}; in process, "
        "no service)."
    )
    section = report(results, stamp)
    REPORT.write_text(splice(REPORT.read_text(), section, heading))
    print(section)
    return results
