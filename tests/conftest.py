from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import pytest
from django.db import connection
from hypothesis import settings as hypothesis_settings
from rest_framework.test import APIClient

from ctxadmin import stack
from ctxadmin.models import SCOPES, App
from ctxadmin.services import create_api_key, create_app


@dataclass
class Tenant:
    app: App
    key: str

    def client(self, key: str | None = None) -> APIClient:
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {key or self.key}")
        return client


def make_tenant(name: str, scopes=SCOPES) -> Tenant:
    app = create_app(name)
    _key, raw = create_api_key(app, scopes, name=f"{name} owner")
    return Tenant(app, raw)


@pytest.fixture
def owner(db) -> Tenant:
    """App ``acme`` with a key holding every scope."""
    return make_tenant("acme")


@pytest.fixture
def outsider(db) -> Tenant:
    """Another tenant, ``globex``, with a key holding every scope."""
    return make_tenant("globex")


@pytest.fixture
def anonymous() -> APIClient:
    return APIClient()


def database_url_for_current_connection() -> str:
    """The URL of the database the tests run against (the test database)."""
    s = connection.settings_dict
    credentials = quote(s["USER"], safe="")
    if s["PASSWORD"]:
        credentials += ":" + quote(s["PASSWORD"], safe="")
    return f"postgres://{credentials}@{s['HOST']}:{s['PORT']}/{s['NAME']}"


@pytest.fixture(scope="session")
def celery_worker_process(django_db_setup, django_db_blocker, tmp_path_factory):
    """A real ``celery worker`` process consuming this run's queue, against the test DB."""
    from ctxadmin.celery import app as celery_app

    with django_db_blocker.unblock():
        database_url = database_url_for_current_connection()
    hostname = f"test-{uuid.uuid4().hex[:8]}@localhost"
    log_path = Path(tmp_path_factory.mktemp("celery")) / "worker.log"
    env = {**os.environ, "DATABASE_URL": database_url, "CTXADMIN_DB_POOL": "false"}
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "ctxadmin",
                "worker",
                "--hostname",
                hostname,
                "--concurrency",
                "1",
                "--loglevel",
                "INFO",
                "--without-gossip",
                "--without-mingle",
            ],
            env=env,
            cwd=stack.PROJECT_DIR,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 90
        while not celery_app.control.ping(destination=[hostname], timeout=1.0):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"celery worker did not start:\n{log_path.read_text()[-4000:]}")
        yield {"hostname": hostname, "pid": process.pid, "log": log_path}
    finally:
        stack.terminate_group(process, timeout=20)


# Property tests are seeded (reproducible in CI) and not timed (timing is for benchmarks).
hypothesis_settings.register_profile("ctxadmin", derandomize=True, deadline=None)
hypothesis_settings.load_profile("ctxadmin")
