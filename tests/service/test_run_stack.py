"""``manage.py run`` (what ``make run`` calls) end to end: the embedded PostgreSQL, migrations,
first-start credentials, Celery worker and beat, gunicorn; restart reusing the data; and a
clean stop on SIGTERM and SIGINT with no process left behind."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time

import httpx
import psutil
import psycopg
import pytest

from ctxadmin import stack
from ctxadmin.testing.service import ServiceProcess

pytestmark = pytest.mark.e2e


class RunningStack(ServiceProcess):
    def wait_up(self, timeout: float = 180) -> None:
        try:
            super().wait_up(timeout)
        except RuntimeError as exc:
            pytest.fail(str(exc))

    def stop(self, signum: int) -> int:
        assert self.process.poll() is None, "the service exited by itself"
        code, alive = super().stop(signum)
        assert not alive, f"left behind: {alive}"
        return code


def test_run_serves_restarts_on_its_data_and_stops_cleanly(tmp_path):
    var = tmp_path / "var"
    log = tmp_path / "run.log"
    first = RunningStack(var, stack.free_port(), log)
    try:
        first.wait_up()
        names = {p.name() for p in first.descendants()} | {
            " ".join(p.cmdline()[:4]) for p in first.descendants()
        }
        assert any("gunicorn" in n for n in names) and any("celery" in n for n in names)
        client = httpx.Client(base_url=first.base_url, timeout=10)

        ready = client.get("/readyz")
        assert ready.status_code == 200, ready.text
        assert all(check["ok"] for check in ready.json()["checks"].values())
        login = client.get("/admin/login/")
        assert login.status_code == 200 and "ctxadmin" in login.text
        assert client.get("/static/admin/css/base.css").status_code == 200
        schema = client.get("/api/schema/", headers={"Accept": "application/vnd.oai.openapi+json"})
        assert schema.json()["openapi"].startswith("3.")

        key = re.search(r"API key\s+:\s+(ctx_\S+)", first.output()).group(1)
        auth = {"Authorization": f"Bearer {key}"}
        assert client.get("/api/v1/apps/demo/", headers=auth).json()["app"] == "demo"
        assert client.get("/api/v1/apps/demo/").status_code == 401

        # gunicorn de-chunks bodies: a chunked PATCH is read, an oversized one refused.
        def chunks(payload: bytes):
            yield from (payload[i : i + 7] for i in range(0, len(payload), 7))

        patched = client.patch(
            "/api/v1/apps/demo/",
            content=chunks(b'{"display_name": "chunked"}'),
            headers={**auth, "Content-Type": "application/json"},
        )
        assert patched.status_code == 200, patched.text
        assert patched.json()["display_name"] == "chunked"
        big = b'{"display_name": "' + b"x" * (9 * 1024 * 1024) + b'"}'
        refused = client.patch(
            "/api/v1/apps/demo/",
            content=iter([big]),
            headers={**auth, "Content-Type": "application/json"},
        )
        assert refused.status_code == 413
        assert refused.json()["error"]["code"] == "request_too_large"

        # Management commands beside the running stack reach the same database and broker.
        beside = {k: v for k, v in first.env.items() if k not in {"REDIS_URL"}}
        probe = subprocess.run(
            [sys.executable, "manage.py", "probe_workers", "--timeout", "60"],
            cwd=stack.PROJECT_DIR,
            env=beside,
            capture_output=True,
            text=True,
            check=False,
        )
        assert probe.returncode == 0, probe.stderr
        assert "completed by" in probe.stdout

        # The database drops every connection of the service (a restart, a failover): each
        # request on a dropped connection is a 503 envelope, and the service recovers alone.
        with psycopg.connect(first.database_url, autocommit=True) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        codes = []
        for _ in range(40):
            response = client.get("/api/v1/apps/demo/", headers=auth)
            codes.append(response.status_code)
            if response.status_code == 503:
                assert response.json()["error"]["code"] == "database_unavailable"
            if codes[-3:] == [200, 200, 200]:
                break
        assert set(codes) <= {200, 503} and codes[-3:] == [200, 200, 200], codes

        state = json.loads((var / "stack.json").read_text())
        assert (var / "stack.json").stat().st_mode & 0o077 == 0
        assert state["pid"] == first.process.pid
    finally:
        code = first.stop(signal.SIGTERM)
    assert code == 0
    assert "stopped" in first.output()

    # Second start: same data, no new credentials, the first key still works; Ctrl-C stops it.
    second = RunningStack(var, stack.free_port(), tmp_path / "run2.log")
    try:
        second.wait_up()
        assert "First start" not in second.output()
        response = httpx.get(
            f"{second.base_url}/api/v1/apps/demo/", headers={"Authorization": f"Bearer {key}"}
        )
        assert response.status_code == 200
        assert response.json()["display_name"] == "chunked"

        # The Celery worker dies (a broker connection lost at the wrong moment can do that):
        # it is started again, and the rest of the stack keeps running.
        killed = celery_worker(second)
        killed.kill()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            replacement = celery_worker(second, required=False)
            if replacement is not None and replacement.pid != killed.pid:
                break
            time.sleep(0.5)
        else:
            pytest.fail("the Celery worker was not started again")
        assert "celery-worker exited with code -9; starting it again in 1 s" in second.output()
        probe = subprocess.run(
            [sys.executable, "manage.py", "probe_workers", "--timeout", "90"],
            cwd=stack.PROJECT_DIR,
            env={k: v for k, v in second.env.items() if k != "REDIS_URL"},
            capture_output=True,
            text=True,
            check=False,
        )
        assert probe.returncode == 0, probe.stderr
    finally:
        assert second.stop(signal.SIGINT) == 0


def celery_worker(service: ServiceProcess, required: bool = True) -> psutil.Process | None:
    """The Celery worker's main process (a child of ``manage.py run``), or None."""
    for process in service.descendants():
        try:
            if process.ppid() == service.process.pid and "worker" in process.cmdline():
                return process
        except psutil.NoSuchProcess:
            continue
    assert not required, "no Celery worker"
    return None


def test_the_supervisor_starts_a_restart_child_again_with_growing_delays():
    supervisor = stack.Supervisor(first_delay=0.05, max_delay=0.1, steady_after=60)
    quick = [sys.executable, "-c", "import sys; sys.exit(3)"]
    supervisor.spawn("quick", quick, {}, restart=True)
    supervisor.spawn("web", [sys.executable, "-c", "import time; time.sleep(60)"], {})
    try:
        noticed, starts = [], []
        deadline = time.monotonic() + 20
        while len(noticed) < 3 and time.monotonic() < deadline:
            before = supervisor.children[0].process
            noticed += supervisor.restart_exited()
            if supervisor.children[0].process is not before:
                starts.append(supervisor.children[0].process.pid)
            time.sleep(0.01)
        assert [(name, code) for name, code, _ in noticed] == [("quick", 3)] * 3
        # Each exit in a row doubles the delay, up to the cap.
        assert [delay for _, _, delay in noticed] == [0.05, 0.1, 0.1]
        assert len(starts) == 2 and len(set(starts)) == 2
        # A restarted child is never reported as exited; the others are.
        assert supervisor.exited() is None
        supervisor.children[1].process.kill()
        supervisor.children[1].process.wait(10)
        assert supervisor.exited() == ("web", -9)
    finally:
        supervisor.stop_all(timeout=5)
    assert supervisor.children == []


def test_a_local_redis_starts_when_none_answers(tmp_path):
    local = stack.LocalRedis(tmp_path / "redis")
    url = local.start()
    try:
        assert stack.redis_answers(url)
        pid = local.process.pid
    finally:
        local.stop()
    assert not stack.redis_answers(url, timeout=0.3)
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_the_embedded_postgres_shared_buffers(monkeypatch):
    monkeypatch.delenv("CTXADMIN_PG_SHARED_BUFFERS", raising=False)
    default = stack.shared_buffers()
    assert re.fullmatch(r"\d+MB", default) and 128 <= int(default[:-2]) <= 2048
    total = psutil.virtual_memory().total // (8 * 1024 * 1024)
    assert int(default[:-2]) == min(max(total, 128), 2048)
    monkeypatch.setenv("CTXADMIN_PG_SHARED_BUFFERS", "512MB")
    assert stack.shared_buffers() == "512MB"
    monkeypatch.setenv("CTXADMIN_PG_SHARED_BUFFERS", "512MB -c fsync=off")
    with pytest.raises(stack.StackError):
        stack.shared_buffers()
