"""The service a benchmark measures: the whole stack as ``make run`` runs it, started in a
``var`` folder of its own, an app of the run with an API key, and stopping it again."""

from __future__ import annotations

import shutil
from datetime import UTC, datetime
from pathlib import Path

from bench.client import Api
from ctxadmin import stack
from ctxadmin.testing.service import ServiceProcess

WEB_WORKERS = 3  # as make run
WEB_THREADS = 4


def fresh_var(var: Path) -> Path:
    """``var`` emptied (its PostgreSQL stopped first, if an earlier run left it running): each
    run measures a database of its own, as a table still holding an earlier run's rows changes
    what its indexes cost."""
    if (var / "pgdata").exists():
        stack.EmbeddedPostgres(var / "pgdata").stop()
    shutil.rmtree(var, ignore_errors=True)
    return var


def bench_service(var: Path, extra_env: dict[str, str] | None = None) -> ServiceProcess:
    """The whole stack as ``make run`` runs it (its web workers and threads), started in
    ``var`` (emptied first) and up; ``extra_env``: settings of its own
    (``CTXADMIN_EMBEDDER``, …)."""
    fresh_var(var)
    service = ServiceProcess(
        var,
        stack.free_port(),
        var / "service.log",
        extra_env={
            "CTXADMIN_WEB_WORKERS": str(WEB_WORKERS),
            "CTXADMIN_WEB_THREADS": str(WEB_THREADS),
            "CTXADMIN_WORKER_CONCURRENCY": "1",
            # The figures are the hashing embedder's unless a section names another (the
            # local model, the service's default where installed, is measured beside it).
            "CTXADMIN_EMBEDDER": "hashing",
            **(extra_env or {}),
        },
    )
    try:
        service.wait_up()
    except BaseException:
        service.stop()
        raise
    return service


def bench_client(service: ServiceProcess, prefix: str, *scopes: str) -> Api:
    """A new app of this run, and a client holding a key with ``scopes``."""
    app = f"{prefix}-{datetime.now(UTC):%Y%m%d%H%M%S}"
    service.manage("create_app", app)
    key = service.manage("create_api_key", "--app", app, "--scopes", *scopes).strip()
    return Api(service.base_url, key, app)


def stop_service(service: ServiceProcess) -> None:
    """Stop the service, and kill what of it outlived the stop."""
    _code, alive = service.stop()
    for process in alive:
        process.kill()


def fresh_database(database_url: str, name: str) -> str:
    """The connection string of database ``name``, created empty (dropped first if an
    earlier run left it) on the server of ``database_url``: a peer's own database."""
    import psycopg
    from psycopg.conninfo import make_conninfo

    with psycopg.connect(make_conninfo(database_url, dbname="postgres"), autocommit=True) as c:
        c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        c.execute(f'CREATE DATABASE "{name}"')
    return make_conninfo(database_url, dbname=name)


def fresh_async_database(database_url: str, name: str) -> str:
    """``fresh_database`` as a SQLAlchemy asyncpg URL (ADK's and the Agents SDK's stores)."""
    # sqlalchemy: the bench extra, imported only when a peer that needs it runs.
    from sqlalchemy.engine import make_url

    fresh_database(database_url, name)
    url = make_url(database_url).set(drivername="postgresql+asyncpg", database=name, query={})
    return url.render_as_string(hide_password=False)
