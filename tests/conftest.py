from __future__ import annotations

import os
import subprocess
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


def make_operator(username: str = "op"):
    """A staff user holding every console permission but ``ctxadmin.view_content``: what an
    operator sees without seeing conversation content."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Permission

    user = get_user_model().objects.create_user(username, password="op-pass-123456", is_staff=True)
    user.user_permissions.add(*Permission.objects.exclude(codename="view_content"))
    return get_user_model().objects.get(pk=user.pk)


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


def spawn(argv: list[str], env: dict, log_path: Path) -> subprocess.Popen:
    """A background process of the project, in its own process group, logging to a file."""
    with open(log_path, "wb") as log:
        return subprocess.Popen(
            argv,
            env=env,
            cwd=stack.PROJECT_DIR,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )


@dataclass
class WorkerProcess:
    """A ``celery worker`` process started by a test (see ``start_celery_worker``)."""

    hostname: str
    process: subprocess.Popen
    log: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def stop(self) -> None:
        stack.terminate_group(self.process, timeout=20)


def start_celery_worker(
    work_dir: Path,
    *,
    env: dict | None = None,
    beat: bool = False,
    concurrency: int = 1,
    loglevel: str = "INFO",
) -> WorkerProcess:
    """A real ``celery worker`` process against this run's test database and queue (or the
    broker ``env`` names), with the embedded beat when ``beat``; returns once it is ready."""
    database_url = database_url_for_current_connection()
    hostname = f"test-{uuid.uuid4().hex[:8]}@localhost"
    work_dir.mkdir(parents=True, exist_ok=True)
    log_path = work_dir / f"worker-{hostname.split('@')[0]}.log"
    environment = {
        **os.environ,
        "DATABASE_URL": database_url,
        "CTXADMIN_DB_POOL": "false",
        **(env or {}),
    }
    argv = stack.celery_worker_argv(
        hostname, concurrency, "--without-gossip", "--without-mingle", loglevel=loglevel
    )
    if beat:
        argv += ["--beat", "--schedule", str(work_dir / f"beat-{hostname.split('@')[0]}")]
    process = spawn(argv, environment, log_path)
    worker = WorkerProcess(hostname, process, log_path)
    deadline = time.monotonic() + 90
    while b" ready." not in log_path.read_bytes():
        if process.poll() is not None or time.monotonic() > deadline:
            worker.stop()
            raise RuntimeError(f"celery worker did not start:\n{log_path.read_text()[-4000:]}")
        time.sleep(0.2)
    return worker


@pytest.fixture(scope="session")
def celery_worker_process(django_db_setup, django_db_blocker, tmp_path_factory):
    """A real ``celery worker`` process consuming this run's queue, against the test DB."""
    with django_db_blocker.unblock():
        worker = start_celery_worker(Path(tmp_path_factory.mktemp("celery")))
    try:
        yield {"hostname": worker.hostname, "pid": worker.pid, "log": worker.log}
    finally:
        worker.stop()


# Property tests are seeded (reproducible in CI) and not timed (timing is for benchmarks).
hypothesis_settings.register_profile("ctxadmin", derandomize=True, deadline=None)
hypothesis_settings.load_profile("ctxadmin")
