"""gunicorn's control socket: none by default (gunicorn's own default is one path per user
account, shared by every instance and deleted by whichever stops first), and where one is
named, it is that instance's alone."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import httpx
import pytest

from ctxadmin import stack
from tests.conftest import database_url_for_current_connection


def _gunicorn(tmp_path, name: str, **env) -> tuple[subprocess.Popen, str]:
    port = stack.free_port()
    environment = {key: value for key, value in os.environ.items() if key != "XDG_RUNTIME_DIR"} | {
        "HOME": str(tmp_path / "home"),
        "DATABASE_URL": database_url_for_current_connection(),
    }
    environment.update(env)
    log = (tmp_path / f"{name}.log").open("wb")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gunicorn",
            "config.wsgi:application",
            "--config",
            "python:config.gunicorn_conf",
            "--bind",
            f"127.0.0.1:{port}",
            "--workers",
            "1",
        ],
        cwd=stack.PROJECT_DIR,
        env=environment,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}/healthz"
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return process, url
        except httpx.HTTPError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            stack.terminate_group(process)
            pytest.fail((tmp_path / f"{name}.log").read_text()[-3000:])
        time.sleep(0.2)


@pytest.mark.django_db
def test_no_shared_control_socket_and_a_named_one_is_the_instances_own(tmp_path):
    (tmp_path / "home").mkdir()
    plain, _ = _gunicorn(tmp_path, "plain")
    own_socket = tmp_path / "run" / "gunicorn.ctl"
    (tmp_path / "run").mkdir()
    named, _ = _gunicorn(tmp_path, "named", CTXADMIN_GUNICORN_CONTROL_SOCKET=str(own_socket))
    try:
        assert own_socket.exists()
        stack.terminate_group(plain)
        assert own_socket.exists()
    finally:
        stack.terminate_group(plain)
        stack.terminate_group(named)
    assert not (tmp_path / "home" / ".gunicorn").exists()
