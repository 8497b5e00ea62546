"""Concurrent saves of one name get distinct, consecutive versions; a session deleted while
saves run leaves no artifact behind and fails no request."""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from ctxadmin.errors import ServiceError
from sessions_app import services as sessions
from sessions_app.artifacts import services
from sessions_app.artifacts.models import ArtifactHead, ArtifactVersion
from tests.conftest import make_tenant

pytestmark = pytest.mark.django_db(transaction=True)


def run_together(count: int, work) -> list:
    """``work(i)`` on ``count`` threads released at once; each result or exception."""
    barrier = threading.Barrier(count)
    results: list = [None] * count

    def run(index: int) -> None:
        try:
            barrier.wait()
            results[index] = work(index)
        except Exception as exc:
            results[index] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return results


@pytest.mark.parametrize("name", ["shared.bin", "user:shared.bin"])
def test_concurrent_saves_get_consecutive_distinct_versions(name):
    tenant = make_tenant("acme")
    sessions.create_session(tenant.app, "alice", "s1", {})

    def save(index: int):
        data = f"writer {index}".encode()
        return services.save_artifact(tenant.app, "alice", "s1", name, data, "text/plain")

    results = run_together(12, save)
    assert all(isinstance(r, services.ArtifactInfo) for r in results), results
    assert sorted(r.version for r in results) == list(range(12))
    assert ArtifactHead.objects.get().next_version == 12
    stored = dict(ArtifactVersion.objects.values_list("version", "sha256"))
    assert {r.version: r.sha256 for r in results} == stored
    for result in results:
        loaded = services.load_artifact(tenant.app, "alice", "s1", name, result.version)
        assert loaded.info.sha256 == result.sha256


def test_saves_racing_a_session_delete_leave_nothing_behind():
    tenant = make_tenant("acme")
    for round_ in range(5):
        sid = f"s{round_}"
        sessions.create_session(tenant.app, "alice", sid, {})

        def work(index: int, sid=sid):
            if index == 0:
                return sessions.delete_session(tenant.app, "alice", sid)
            return services.save_artifact(
                tenant.app, "alice", sid, f"n{index % 3}", b"x" * 1000, "text/plain"
            )

        results = run_together(8, work)
        for result in results[1:]:
            if isinstance(result, ServiceError):
                assert result.code == "not_found", result
            else:
                assert isinstance(result, services.ArtifactInfo), result
        assert results[0] is None, results[0]
    assert ArtifactHead.objects.count() == 0
    assert ArtifactVersion.objects.count() == 0


def test_saves_racing_a_delete_of_the_name_keep_versions_consecutive():
    tenant = make_tenant("acme")
    sessions.create_session(tenant.app, "alice", "s1", {})
    services.save_artifact(tenant.app, "alice", "s1", "n", b"x", "text/plain")

    def work(index: int):
        if index % 4 == 0:
            try:
                return services.delete_artifact(tenant.app, "alice", "s1", "n")
            except ServiceError as exc:
                return exc.code
        return services.save_artifact(tenant.app, "alice", "s1", "n", b"y", "text/plain")

    results = run_together(12, work)
    assert not [r for r in results if isinstance(r, Exception)], results
    versions = list(ArtifactVersion.objects.order_by("version").values_list("version", flat=True))
    assert versions == list(range(len(versions)))
    head = ArtifactHead.objects.filter(name="n").first()
    assert (head.next_version if head else 0) == len(versions)
