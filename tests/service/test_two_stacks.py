"""Two ``make run`` stacks on one machine's Redis (no REDIS_URL, database 0): each one's
tasks reach only its own workers, and a stack configured onto another's queue is warned of
it at start-up and still never takes the other's tasks."""

from __future__ import annotations

import json

import pytest

from ctxadmin import stack
from ctxadmin.testing.service import ServiceProcess

pytestmark = pytest.mark.e2e

PROBES = 4


def _start(tmp_path, name: str, **env) -> ServiceProcess:
    service = ServiceProcess(
        tmp_path / name,
        stack.free_port(),
        tmp_path / f"{name}.log",
        extra_env=env,
        without_env=("REDIS_URL",),
    )
    return service


def _up(service: ServiceProcess) -> None:
    try:
        service.wait_up()
    except RuntimeError as exc:
        pytest.fail(str(exc))


def _probes_all_return(service: ServiceProcess, probes: int = PROBES, timeout: int = 60) -> None:
    for _ in range(probes):
        out = service.manage("probe_workers", "--timeout", str(timeout))
        assert "completed by" in out


# Two deployments on one queue (misconfigured): each worker holds the other's tasks for a
# second before handing them back, and when both are busy doing so a task can wait through
# many hand-backs before its own worker is free: it must still get there, later.
SHARED_QUEUE_PROBES, SHARED_QUEUE_TIMEOUT = 2, 180


def _queue(service: ServiceProcess) -> str:
    return service.manage(
        "shell",
        "--no-imports",
        "-c",
        "from django.conf import settings; print(settings.CELERY_TASK_DEFAULT_QUEUE)",
    ).strip()


def test_two_stacks_on_one_redis_keep_their_tasks(tmp_path):
    if not stack.redis_answers("redis://127.0.0.1:6379/0"):
        pytest.skip("needs the machine's Redis at 127.0.0.1:6379")
    # One after the other: two embedded PostgreSQL servers starting at the same moment can
    # draw the same free port.
    first = _start(tmp_path, "first")
    stacks = [first]
    try:
        _up(first)
        second = _start(tmp_path, "second")
        stacks.append(second)
        _up(second)
        for service in stacks:
            assert json.loads((service.var / "stack.json").read_text())["redis_url"] == (
                "redis://127.0.0.1:6379/0"
            )
        assert _queue(first) != _queue(second)
        _probes_all_return(first)
        _probes_all_return(second)

        # A third stack told to use the first one's queue: it is warned at start-up, and the
        # workers of both hand each other's tasks back instead of taking them.
        second.stop()
        stacks.remove(second)
        third = _start(tmp_path, "third", CTXADMIN_CELERY_QUEUE=_queue(first))
        stacks.append(third)
        _up(third)
        _probes_all_return(third, SHARED_QUEUE_PROBES, SHARED_QUEUE_TIMEOUT)
        _probes_all_return(first, SHARED_QUEUE_PROBES, SHARED_QUEUE_TIMEOUT)
        logs = third.output() + first.output()
        assert "a worker of another deployment answers on this queue" in logs
    finally:
        for service in stacks:
            if service.process.poll() is None:
                service.stop()
