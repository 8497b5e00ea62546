"""Brings up the test stack before pytest-django reads the settings.

Loaded with ``-p ctxadmin.testing.pytest_plugin`` (see pyproject.toml), so plain ``pytest``
in the venv works as well as ``make test``:

- PostgreSQL: ``DATABASE_URL`` when given, else an embedded PostgreSQL 18 + pgvector cluster
  in ``var/pgtest`` (pytest-django then creates ``test_ctxadmin`` in it);
- Redis: ``REDIS_URL`` when given, else 127.0.0.1:6379 database 15, else a server started
  here; tasks go to a queue of this run only, so a ``make run`` beside it is not disturbed.
"""

from __future__ import annotations

import os
import uuid

import pytest

from ctxadmin import stack

_started: dict = {}


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_load_initial_conftests(early_config, parser, args):
    _bring_up()
    return (yield)


def _bring_up() -> None:
    os.environ.setdefault("SECRET_KEY", "ctxadmin-test-suite-secret-key-not-for-deployment")
    os.environ.setdefault("CTXADMIN_LOG_FORMAT", "text")
    # The deterministic embedder, whatever is installed; tests of the local model name it.
    os.environ.setdefault("CTXADMIN_EMBEDDER", "hashing")
    if not os.environ.get("DATABASE_URL"):
        postgres = stack.EmbeddedPostgres(stack.var_dir() / "pgtest", preferred_port=55433)
        os.environ["DATABASE_URL"] = postgres.start()
        _started["postgres"] = postgres
    redis_url, local = stack.resolve_redis(
        os.environ.get("REDIS_URL"), stack.var_dir() / "redis-test", db=15
    )
    os.environ["REDIS_URL"] = redis_url
    if local is not None:
        _started["redis"] = local
    run = uuid.uuid4().hex[:12]
    os.environ.setdefault("CTXADMIN_CELERY_QUEUE", f"ctxadmin-test-{run}")
    # The test database's name differs from the one settings derive the deployment from:
    # the run names its deployment, and the workers it starts inherit it.
    os.environ.setdefault("CTXADMIN_DEPLOYMENT", f"test-{run}")


def pytest_unconfigure(config):
    redis_server = _started.pop("redis", None)
    if redis_server is not None:
        redis_server.stop()
    postgres = _started.pop("postgres", None)
    if postgres is not None and postgres.started_here:
        postgres.stop()
