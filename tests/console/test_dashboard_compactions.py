"""The dashboard's compaction failures: a client's request with nothing to compact is
answered as such, not counted as a failure."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from sessions_app.models import Checkpoint
from sessions_app.selectors import compactions_per_hour
from tests.sessions_helpers import sessions_url

pytestmark = pytest.mark.django_db


def test_nothing_to_compact_is_requested_but_not_failed(owner):
    api = owner.client()
    assert api.post(sessions_url("acme"), {"session_id": "s"}, format="json").status_code == 201
    answer = api.post(f"{sessions_url('acme')}/s/compactions", {}, format="json")
    assert answer.status_code >= 400, answer.content
    row = Checkpoint.objects.get()
    assert (row.status, row.reason) == ("failed", "nothing_to_compact")
    hour = timezone.now().replace(minute=0, second=0, microsecond=0)
    counts = compactions_per_hour([hour - timedelta(hours=1), hour])
    assert sum(counts["requested"]) == 1
    assert sum(counts["failed"]) == 0
    # Another failure is still one.
    Checkpoint.objects.filter(pk=row.pk).update(reason="provider_error")
    assert sum(compactions_per_hour([hour - timedelta(hours=1), hour])["failed"]) == 1
