"""``bench/BENCHMARKS.md`` stays true when a section is measured again alone: the section is
replaced whole, and no line of one benchmark is left under another's heading."""

from __future__ import annotations

import re

from bench.sections import REPORT, splice

TEXT = "# B\n\n## One\n\nold one\nold tail\n\n## Two\n\ntwo stays\n"


def test_a_section_measured_again_replaces_all_of_the_old_one():
    updated = splice(TEXT, "## One\n\nnew one\n", "## One")
    assert updated == "# B\n\n## One\n\nnew one\n\n## Two\n\ntwo stays\n"
    assert splice(TEXT, "## Three\n\nthree\n", "## Three").endswith(
        "two stays\n\n## Three\n\nthree\n"
    )


def test_the_mcp_figure_stands_under_the_mcp_heading_only():
    sections = re.split(r"\n(?=## )", REPORT.read_text())
    holding = [s.splitlines()[0] for s in sections if re.search(r"^MCP adds ", s, re.MULTILINE)]
    assert holding == ["## MCP"]
