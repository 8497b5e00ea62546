"""An invocation's record: a repeated id finds the stored one, inside a transaction too."""

from __future__ import annotations

import pytest
from django.db import transaction

from sessions_app import invocation_records
from sessions_app.models import Invocation
from sessions_app.services import create_session
from tests.conftest import make_tenant

pytestmark = pytest.mark.django_db


def test_a_repeated_id_inside_a_transaction_leaves_it_usable():
    session, _body = create_session(make_tenant("acme").app, "alice", "s1", {})
    with transaction.atomic():
        first = invocation_records.start(session, "turn-1", "fake", "fake-1", "f" * 64)
        assert first is not None
        assert invocation_records.start(session, "turn-1", "fake", "fake-1", "f" * 64) is None
        # The transaction goes on: the stored record is read back.
        assert Invocation.objects.get(session=session, invocation_id="turn-1").pk == first.pk
