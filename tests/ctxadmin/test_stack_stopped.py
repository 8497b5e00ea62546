"""With the stack stopped, a management command run beside it says so in one line instead of
a traceback; an error that is not the database being down keeps its traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ctxadmin import stack


def _manage(var, *args, **env) -> subprocess.CompletedProcess:
    environment = {
        key: value
        for key, value in os.environ.items()
        if key not in {"DATABASE_URL", "CTXADMIN_DEPLOYMENT", "CTXADMIN_CELERY_QUEUE"}
    }
    environment.update({"CTXADMIN_VAR_DIR": str(var), **env})
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=stack.PROJECT_DIR,
        env=environment,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


@pytest.fixture
def stopped_stack(tmp_path):
    """A var folder as ``make run`` leaves it once stopped: its database's port is dead."""
    stack.ensure_secret_key(tmp_path)
    dead = stack.free_port()
    stack.write_state(
        {
            "database_url": f"postgres://postgres:pw@127.0.0.1:{dead}/ctxadmin",
            "redis_url": "redis://127.0.0.1:6379/0",
            "web_url": "http://127.0.0.1:8000",
        },
        tmp_path,
    )
    return tmp_path


@pytest.mark.parametrize("command", [["probe_workers"], ["create_app", "shop"], ["migrate"]])
def test_a_command_beside_a_stopped_stack_says_to_start_it(stopped_stack, command):
    done = _manage(stopped_stack, *command)
    assert done.returncode == 1
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("ctxadmin is not running here: `make run`")
    assert "Traceback" not in done.stderr


def test_an_external_database_that_is_down_is_named_as_such(stopped_stack):
    dead = json.loads((stopped_stack / "stack.json").read_text())["database_url"]
    done = _manage(stopped_stack, "probe_workers", DATABASE_URL=dead)
    assert done.returncode == 1
    assert done.stderr.strip().startswith("ctxadmin: the database at DATABASE_URL")
    assert "pw" not in done.stderr  # never the password
