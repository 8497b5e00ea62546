"""A database connection lost under the service (restart, failover) fails that request with
a 503 envelope, and the next request works again, without restarting anything."""

from __future__ import annotations

import psycopg
import pytest
from django.db import OperationalError, close_old_connections, connection

from tests.conftest import database_url_for_current_connection, make_tenant


@pytest.mark.django_db(transaction=True)
def test_a_lost_connection_is_a_503_and_then_recovers():
    tenant = make_tenant("outage")
    client = tenant.client()
    url = "/api/v1/apps/outage/users/alice/sessions"
    assert client.get(url).status_code == 200
    backend_pid = connection.connection.info.backend_pid
    with psycopg.connect(database_url_for_current_connection(), autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", [backend_pid])
    failed = client.get(url)
    assert failed.status_code == 503
    assert failed.json()["error"]["code"] == "database_unavailable"
    assert failed["Retry-After"] == "1"
    # What Django's handler does when a request finishes (the test client skips it): the
    # connection that failed is found unusable and closed; the next request reconnects.
    close_old_connections()
    assert client.get(url).status_code == 200


@pytest.mark.django_db(transaction=True)
def test_a_lost_connection_during_the_consent_check_is_not_a_missing_consent():
    """Memory governance fails closed; a database it cannot reach refuses the request as
    unavailable (503, retry), never as a user without consent (403)."""
    from memory import governance

    tenant = make_tenant("outage")
    governance.require_read_consent(tenant.app, "alice")  # no policy: allowed
    backend_pid = connection.connection.info.backend_pid
    with psycopg.connect(database_url_for_current_connection(), autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", [backend_pid])
    with pytest.raises(OperationalError):
        governance.require_read_consent(tenant.app, "alice")
    close_old_connections()
    governance.require_read_consent(tenant.app, "alice")
