"""The console's words: "Memory policies", and times with seconds and the zone."""

from __future__ import annotations

import re

import pytest

from tests.conftest import make_operator


@pytest.fixture
def operator(db, client):
    client.force_login(make_operator())
    return client


def test_the_index_says_memory_policies(operator):
    page = operator.get("/admin/").content.decode()
    assert "Memory policies" in page and "Memory policys" not in page


def test_times_show_seconds_and_the_zone(operator, owner):
    page = operator.get(f"/admin/ctxadmin/app/{owner.app.pk}/change/").content.decode()
    assert re.search(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} UTC", page), page[-3000:]
