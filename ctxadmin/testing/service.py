"""``manage.py run`` as a child process: for end-to-end tests and benchmarks."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from ctxadmin import stack

# The service finds (or makes) these itself; a test run's values must not leak into it.
_NOT_INHERITED = {
    "DATABASE_URL",
    "CTXADMIN_CELERY_QUEUE",
    "CTXADMIN_DEPLOYMENT",
    "PROMETHEUS_MULTIPROC_DIR",
    "SECRET_KEY",
}


class ServiceProcess:
    """The whole stack started with its own ``var`` folder and web port."""

    def __init__(
        self,
        var: Path,
        port: int,
        log: Path,
        *,
        extra_env: dict[str, str] | None = None,
        without_env: tuple[str, ...] = (),
    ):
        """``without_env``: more variables of this process the service does not get (e.g.
        ``REDIS_URL``, to find Redis as ``make run`` does)."""
        self.var, self.port, self.log = var, port, log
        dropped = _NOT_INHERITED | set(without_env)
        env = {key: value for key, value in os.environ.items() if key not in dropped}
        self.env = {
            **env,
            "CTXADMIN_VAR_DIR": str(var),
            "PORT": str(port),
            "CTXADMIN_WEB_WORKERS": "2",
            "CTXADMIN_WORKER_CONCURRENCY": "1",
            **(extra_env or {}),
        }
        log.parent.mkdir(parents=True, exist_ok=True)
        self._handle = log.open("wb")  # fresh: wait_up reads this run's output only
        self.process = subprocess.Popen(
            [sys.executable, "manage.py", "run"],
            cwd=stack.PROJECT_DIR,
            env=self.env,
            stdout=self._handle,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        self.base_url = f"http://127.0.0.1:{port}"

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_up(self, timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        while "ctxadmin is up at" not in self.output():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the service did not come up:\n{self.output()[-5000:]}")
            time.sleep(0.3)

    @property
    def database_url(self) -> str:
        return json.loads((self.var / "stack.json").read_text())["database_url"]

    def manage(self, *args: str) -> str:
        """Run a management command beside the service (it finds it through var/)."""
        result = subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=stack.PROJECT_DIR,
            env=self.env,
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            raise RuntimeError(f"manage.py {args[0]} failed: {result.stderr[-2000:]}")
        return result.stdout

    def descendants(self) -> list[psutil.Process]:
        found = psutil.Process(self.process.pid).children(recursive=True)
        pid_file = self.var / "pgdata" / "postmaster.pid"
        if pid_file.exists():
            found.append(psutil.Process(int(pid_file.read_text().split()[0])))
        return found

    def stop(
        self, signum: int = signal.SIGTERM, timeout: float = 90
    ) -> tuple[int, list[psutil.Process]]:
        """Signal the service and wait; returns (exit code, processes left behind)."""
        processes = self.descendants() if self.process.poll() is None else []
        self.process.send_signal(signum)
        code = self.process.wait(timeout)
        self._handle.close()
        _gone, alive = psutil.wait_procs(processes, timeout=10)
        return code, alive
