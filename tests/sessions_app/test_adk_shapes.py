"""The committed table of ADK's event models is the installed google-adk's."""

from __future__ import annotations

from tests.sessions_app import adk_table


def test_the_committed_table_matches_the_installed_adk():
    committed = adk_table.MODULE.read_text()
    assert committed == adk_table.render(), (
        "sessions_app/adk_shapes.py differs from the installed google-adk: run "
        "`python -m tests.sessions_app.adk_table` and review what ctxadmin now keeps"
    )
