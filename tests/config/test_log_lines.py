"""Every log line is one JSON object: gunicorn's start-up and access lines, Celery's worker
and beat start-up (no banners) and their routine lines; the beat's sweepers that find
nothing to do say so at DEBUG only."""

from __future__ import annotations

import io
import json
import logging
import os
import time

import httpx
import pytest
from celery import signals
from celery.app import trace

from caching.tasks import cleanup
from ctxadmin import stack
from ctxadmin.telemetry import JsonFormatter
from tests.config.test_gunicorn_control_socket import _gunicorn
from tests.conftest import start_celery_worker


def _records(text: str) -> list[dict]:
    """The log's lines, each parsed as JSON (a line that is not JSON fails the test)."""
    lines = text.splitlines()
    if os.geteuid() == 0:
        # Celery warns through Python's warnings, before logging starts, when run as root
        # (as CI containers do); that is the platform speaking, not a log line.
        lines = _without_root_warning(lines)
    records = []
    for line in lines:
        if line.strip():
            try:
                records.append(json.loads(line))
            except ValueError:
                pytest.fail(f"not a JSON log line: {line[:200]!r}")
    return records


def _without_root_warning(lines: list[str]) -> list[str]:
    kept, skipping = [], False
    for line in lines:
        if "SecurityWarning: You're running the worker with superuser privileges" in line:
            skipping = True
        if not skipping:
            kept.append(line)
        if skipping and "_warn_or_raise_security_error(" in line:
            skipping = False
    return kept


@pytest.mark.django_db
def test_gunicorn_start_up_and_access_lines_are_json(tmp_path):
    (tmp_path / "home").mkdir()
    process, url = _gunicorn(tmp_path, "web", CTXADMIN_LOG_FORMAT="json")
    try:
        assert httpx.get(f"{url}?token=s3cret-in-query", timeout=5).status_code == 200
        time.sleep(0.5)
    finally:
        stack.terminate_group(process)
    records = _records((tmp_path / "web.log").read_text())
    starting = [r for r in records if r["event"].startswith("Starting gunicorn")]
    assert starting and starting[0]["logger"] == "gunicorn.error"
    access = [r for r in records if r["logger"] == "gunicorn.access" and r["path"] == "/healthz"]
    assert access, records
    line = access[-1]
    assert (line["method"], line["status"], line["event"]) == ("GET", 200, "GET /healthz 200")
    assert isinstance(line["duration_ms"], float) and line["bytes"] > 0
    assert "s3cret" not in (tmp_path / "web.log").read_text()


@pytest.mark.django_db(transaction=True)
def test_a_worker_and_its_beat_log_json_and_idle_sweeps_at_debug(tmp_path):
    worker = start_celery_worker(
        tmp_path,
        beat=True,
        loglevel="DEBUG",
        env={
            "CTXADMIN_LOG_FORMAT": "json",
            "CTXADMIN_OUTBOX_SWEEP_SECONDS": "1",
            "CTXADMIN_CACHE_CLEANUP_SECONDS": "1",
        },
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            # Every periodic task is due at the beat's start: wait for the outbox's own line
            # (whichever of them the worker ran first), and one line more.
            text = worker.log.read_text()
            complete = text[: text.rfind("\n") + 1]  # not a line the worker is still writing
            housekeeping = [r for r in _records(complete) if r["event"] == "housekeeping"]
            if len(housekeeping) >= 2 and any(
                r.get("task") == "memory.drain_outbox" for r in housekeeping
            ):
                break
            time.sleep(0.5)
        records = _records(worker.log.read_text())
    finally:
        worker.stop()
    assert not any("-------------- " in r["event"] for r in records)  # no banner
    (start,) = [r for r in records if r["event"] == "worker starting"]
    assert start["worker"] == worker.hostname and start["concurrency"] == 1
    assert [r for r in records if r["event"] == "beat starting"]
    sweeps = [r for r in records if r["event"] == "housekeeping"]
    assert sweeps and {r["level"] for r in sweeps} == {"DEBUG"}, sweeps
    assert "memory.drain_outbox" in {r["task"] for r in sweeps}
    routine = [
        r
        for r in records
        if r["logger"] in {"celery.beat", "celery.worker.strategy", "celery.app.trace"}
        and ("memory.drain_outbox" in r["event"] or "caching.cleanup" in r["event"])
    ]
    assert routine and {r["level"] for r in routine} == {"DEBUG"}, routine


@pytest.fixture
def emitted():
    """What the root logger's handlers write, as JSON records (a handler of the project's
    JSON format beside the harness's own)."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logging.getLogger().addHandler(handler)

    def read() -> list[dict]:
        text = stream.getvalue()
        stream.seek(0)
        stream.truncate()
        return [json.loads(line) for line in text.splitlines() if line.strip()]

    yield read
    logging.getLogger().removeHandler(handler)


def test_at_info_an_idle_sweep_logs_nothing_and_a_busy_one_its_counts(emitted):
    assert logging.getLogger().getEffectiveLevel() == logging.INFO
    context = {"id": "t1", "name": "caching.cleanup", "return_value": "{}", "runtime": 0.01}
    trace.info(trace.LOG_SUCCESS, context)
    signals.task_postrun.send(sender=cleanup, task_id="t1", retval={"deleted": 0}, state="SUCCESS")
    assert emitted() == []

    signals.task_postrun.send(sender=cleanup, task_id="t2", retval={"deleted": 2}, state="SUCCESS")
    other = {"id": "t3", "name": "sessions_app.run_compaction", "return_value": "1", "runtime": 1}
    trace.info(trace.LOG_SUCCESS, other)
    lines = emitted()
    assert [(r["level"], r["event"]) for r in lines] == [
        ("INFO", "housekeeping"),
        ("INFO", "Task sessions_app.run_compaction[t3] succeeded in 1s: 1"),
    ]
    assert lines[0]["task"] == "caching.cleanup" and lines[0]["deleted"] == 2
