"""The fault runs: PostgreSQL restarted, Redis stopped and started, the Celery pool and a web
worker SIGKILLed mid-work, each during the same load and checked after it."""

from __future__ import annotations

import os
import random
import signal
import time
import uuid
from collections.abc import Callable

import psutil

from bench.load.checks import data_failures, database, read_events, settle, verify
from bench.load.client import Client, now
from bench.load.figures import endpoint_table, errors_by_kind
from bench.load.plan import (
    BATCH_MIX,
    BIG_COMPACT_EVENTS,
    BIG_INGEST_EVENTS,
    FAULT_MAX_REQUESTS,
    FAULT_SECONDS,
    MIX,
    PG_DOWN_SECONDS,
    RECOVERY_TARGET_SECONDS,
    REDIS_DOWN_SECONDS,
    SETTLE_SECONDS,
    WEB_KILLS,
    WEB_WORKERS,
    WORKER_CONCURRENCY,
)
from bench.load.processes import processes_of
from bench.load.traffic import Workload
from bench.workload import conversation
from ctxadmin import stack
from ctxadmin.testing.service import ServiceProcess


def fault_run(service: ServiceProcess, key: str, app: str, name: str, mix, marks) -> Workload:
    work = Workload(service.base_url, key, app, name, mix, FAULT_MAX_REQUESTS)
    work.seed()
    work.start = work.drive(FAULT_SECONDS, marks(work))
    work.end = now()
    return work


def common(work: Workload, service: ServiceProcess, faults: int, settled=None) -> dict:
    settled = settled or settle(service, work)
    check = verify(service, work)
    return {
        "seconds": round(work.end - work.start, 1),
        "requests": len(work.calls),
        "faults_injected": faults,
        "errors": errors_by_kind(work.calls),
        "acknowledged_writes_lost": check.get("acknowledged_lost", 0)
        + check.get("memories_lost", 0)
        + check.get("ingested_lost", 0)
        + check.get("jobs_missing", 0),
        "duplicates": check.get("duplicated_event_ids", 0)
        + check.get("memories_duplicated", 0)
        + check.get("ingested_duplicated", 0),
        "partial_writes": check.get("partial_writes", 0),
        "settle": settled,
        "check": check,
        "data_failures": data_failures(check, settled),
    }


def postgres_restart(service: ServiceProcess, key: str, app: str) -> dict:
    marks: dict = {}

    def restart() -> None:
        postgres = stack.EmbeddedPostgres(service.var / "pgdata")
        postgres._prepare_user()  # pg_ctl refuses to run as root: the server's user runs it
        _pid, port = postgres.running_pid_and_port()
        marks["stop"] = now()
        postgres.stop()  # pg_ctl stop -m fast -w
        marks["down"] = now()
        time.sleep(PG_DOWN_SECONDS)
        again = stack.EmbeddedPostgres(service.var / "pgdata", preferred_port=port)
        again.start()
        marks["up"] = now()
        marks["same_port"] = again.port == port

    work = fault_run(service, key, app, "pg", MIX, lambda w: [(FAULT_SECONDS / 3, restart)])
    result = common(work, service, 1)
    during = [c for c in work.calls if marks["stop"] <= c.start <= marks["up"]]
    after = [c for c in work.calls if c.start > marks["up"]]
    unavailable = [c for c in during if c.outcome == "http 503 database_unavailable"]
    other = [c for c in during if not c.ok and c.outcome != "http 503 database_unavailable"]
    failed_after = [c for c in after if not c.ok]
    first_ok = min((c.end for c in after if c.ok), default=None)
    recovered = max((c.end for c in failed_after), default=marks["up"])
    first_ok_by_endpoint = {
        endpoint: round(
            min(c.end for c in after if c.ok and c.endpoint == endpoint) - marks["up"], 2
        )
        for endpoint in {c.endpoint for c in after if c.ok}
    }
    result.update(
        {
            "outage_seconds": round(marks["up"] - marks["stop"], 1),
            "same_port": marks["same_port"],
            "during_outage": {
                "requests": len(during),
                "ok": sum(1 for c in during if c.ok),
                "503_envelope": len(unavailable),
                "other": len(other),
                "other_kinds": errors_by_kind(other),
            },
            "failed_after_restart": len(failed_after),
            "failed_after_restart_kinds": errors_by_kind(failed_after),
            "first_ok_after_restart_s": None
            if first_ok is None
            else round(first_ok - marks["up"], 2),
            "first_ok_by_endpoint_s": first_ok_by_endpoint,
            "recovery_seconds": round(recovered - marks["up"], 2),
        }
    )
    failed = [f"postgres restart: {name}" for name in result["data_failures"]]
    if other:
        failed.append(
            f"postgres restart: {len(other)} requests during the outage not a 503 envelope"
        )
    if set(first_ok_by_endpoint) != {_endpoint_of(operation) for operation, _w in MIX}:
        failed.append("postgres restart: an endpoint never answered 2xx after the restart")
    if result["recovery_seconds"] > RECOVERY_TARGET_SECONDS:
        failed.append(
            f"postgres restart: failures until {result['recovery_seconds']} s after restart"
        )
    if not marks["same_port"]:
        failed.append("postgres restart: PostgreSQL came back on another port")
    result["failures"] = failed
    return result


def _endpoint_of(operation: str) -> str:
    return "ingest_admit" if operation == "ingest" else operation


def redis_outage(service: ServiceProcess, key: str, app: str, redis: dict) -> dict:
    marks: dict = {}

    def outage() -> None:
        server: stack.LocalRedis = redis["server"]
        port = server.port
        marks["stop"] = now()
        server.stop()
        marks["down"] = now()
        time.sleep(REDIS_DOWN_SECONDS)
        again = stack.LocalRedis(server.work_dir, port=port)
        again.start()
        redis["server"] = again
        marks["up"] = now()

    work = fault_run(service, key, app, "redis", MIX, lambda w: [(FAULT_SECONDS / 3, outage)])
    settled = settle(service, work)
    result = common(work, service, 1, settled)
    during = [c for c in work.calls if marks["down"] <= c.start <= marks["up"]]
    before = [c for c in work.calls if c.end < marks["stop"]]
    result.update(
        {
            "outage_seconds": round(marks["up"] - marks["stop"], 1),
            "during_outage": {
                "requests": len(during),
                "ok": sum(1 for c in during if c.ok),
                "errors": errors_by_kind(during),
                "endpoints": endpoint_table(during, marks["up"] - marks["down"]),
            },
            "before_outage_endpoints": endpoint_table(before, marks["stop"] - work.start),
            # From Redis's return until the run's jobs had ended, and its compactions.
            "jobs_done_after_return_s": _after(work.end, settled.get("jobs_done_s"), marks),
            "compactions_done_after_return_s": _after(
                work.end, settled.get("compactions_done_s"), marks
            ),
        }
    )
    failed = [f"redis outage: {name}" for name in result["data_failures"]]
    if result["errors"]:
        failed.append(f"redis outage: {sum(result['errors'].values())} requests not 2xx")
    result["failures"] = failed
    return result


def _after(end: float, waited: float | None, marks: dict) -> float | None:
    return None if waited is None else round(max(0.0, end + waited - marks["up"]), 1)


def kill_pool(service: ServiceProcess) -> list[int]:
    killed = []
    for process in processes_of(service, "celery_pool"):
        try:
            os.kill(process.pid, signal.SIGKILL)
            killed.append(process.pid)
        except ProcessLookupError:
            continue
    return killed


def worker_kill(service: ServiceProcess, key: str, app: str) -> dict:
    """An ingestion job of ``BIG_INGEST_EVENTS`` events and an asynchronous compaction of a
    session of ``BIG_COMPACT_EVENTS`` events; each time, once the database shows the work
    running (the job with some but not all of its batches written; the compaction
    ``running``), every Celery pool process is SIGKILLed."""
    setup = Client(service.base_url, key)
    user = "kill-big"
    base = f"/api/v1/apps/{app}/users/{user}"
    rng = random.Random("kill")  # noqa: S311
    setup.send("POST", f"{base}/sessions", {"session_id": "ingest"}, {201})
    setup.send("POST", f"{base}/sessions", {"session_id": "compact"}, {201})
    # No automatic compaction of these two: the faults are aimed at known work.
    for sid in ("ingest", "compact"):
        setup.send(
            "PUT",
            f"{base}/sessions/{sid}/compaction-policy",
            {"token_threshold": 10_000_000},
            {200},
        )
    for start in range(0, BIG_INGEST_EVENTS, 500):
        events = [Workload.text_event(rng, f"big-i-{n}") for n in range(start, start + 500)]
        setup.send("POST", f"{base}/sessions/ingest/events", {"events": events}, {201})
    stream = list(conversation(rng, BIG_COMPACT_EVENTS, "kill"))
    for n, event in enumerate(stream):
        event["event_id"] = f"big-c-{n}"
    for start in range(0, BIG_COMPACT_EVENTS, 500):
        setup.send(
            "POST",
            f"{base}/sessions/compact/events",
            {"events": stream[start : start + 500]},
            {201},
        )
    compaction_id = str(uuid.uuid4())
    marks: dict = {"kills": []}

    def kill_ingestion() -> None:
        answer = setup.send("POST", f"{base}/memories/ingestions", {"session_id": "ingest"}, {202})
        marks["job"] = answer["job_id"]
        marks["job_admitted"] = now()
        deadline = now() + 60
        with database(service) as conn:
            while now() < deadline:
                phase, cursor, events = conn.execute(
                    "SELECT phase, cursor, events FROM memory_outboxjob WHERE id = %s",
                    [answer["job_id"]],
                ).fetchone()
                if phase == "running" and 0 < cursor < events:
                    marks["kills"].append(("ingestion", now(), kill_pool(service)))
                    marks["job_cursor_at_kill"] = cursor
                    return
                if phase in ("completed", "failed", "cancelled"):
                    marks["job_missed"] = phase
                    return
                time.sleep(0.01)

    def kill_compaction() -> None:
        answer = Client(service.base_url, key).send(
            "POST",
            f"{base}/sessions/compact/compactions",
            {"async": True, "compaction_id": compaction_id},
            {202},
        )
        marks["compaction_requested"] = now()
        deadline = now() + 60
        with database(service) as conn:
            while now() < deadline:
                status = conn.execute(
                    "SELECT status FROM sessions_app_checkpoint WHERE compaction_id = %s",
                    [answer["compaction_id"]],
                ).fetchone()[0]
                if status == "running":
                    marks["kills"].append(("compaction", now(), kill_pool(service)))
                    return
                if status not in ("pending", "running"):
                    marks["compaction_missed"] = status
                    return
                time.sleep(0.002)

    work = fault_run(
        service,
        key,
        app,
        "kill",
        MIX,
        lambda w: [(FAULT_SECONDS / 4, kill_ingestion), (FAULT_SECONDS / 2, kill_compaction)],
    )
    # The two pieces of work must end; the time from each kill until it did.
    job_done = compaction_done = None
    deadline = now() + SETTLE_SECONDS
    while now() < deadline and (job_done is None or compaction_done is None):
        with database(service) as conn:
            phase = conn.execute(
                "SELECT phase FROM memory_outboxjob WHERE id = %s", [marks.get("job")]
            ).fetchone()
            status = conn.execute(
                "SELECT status FROM sessions_app_checkpoint WHERE compaction_id = %s",
                [compaction_id],
            ).fetchone()
        if job_done is None and phase and phase[0] in ("completed", "failed", "cancelled"):
            job_done = (now(), phase[0])
        if compaction_done is None and status and status[0] not in ("pending", "running"):
            compaction_done = (now(), status[0])
        time.sleep(0.5)
    result = common(work, service, len(marks["kills"]))
    with database(service) as conn:
        job = conn.execute(
            "SELECT phase, events, added, duplicates, skipped, attempts FROM memory_outboxjob "
            "WHERE id = %s",
            [marks.get("job")],
        ).fetchone()
        entries, distinct = conn.execute(
            """
            SELECT count(*), count(DISTINCT e.event_id) FROM memory_memoryentry e
              JOIN ctxadmin_app a ON a.id = e.app_id
             WHERE a.name = %s AND e.user_id = %s AND e.session_id = 'ingest'
            """,
            [app, user],
        ).fetchone()
        compaction = conn.execute(
            "SELECT status, reason FROM sessions_app_checkpoint WHERE compaction_id = %s",
            [compaction_id],
        ).fetchone()
        committed = conn.execute(
            """
            SELECT count(*) FROM sessions_app_checkpoint c
              JOIN sessions_app_session s ON s.id = c.session_id
              JOIN ctxadmin_app a ON a.id = s.app_id
             WHERE a.name = %s AND s.user_id = %s AND s.session_id = 'compact'
               AND c.status IN ('active', 'superseded')
            """,
            [app, user],
        ).fetchone()[0]
    summaries = sum(
        1
        for event in read_events(setup, f"{base}/sessions/compact")
        if event["event_id"] == f"compaction-{compaction_id}"
    )
    setup.close()
    kill_times = {what: at for what, at, _pids in marks["kills"]}
    pool_now = len(processes_of(service, "celery_pool"))
    result.update(
        {
            "kills": [
                {"during": what, "pool_processes_killed": len(pids)}
                for what, _at, pids in marks["kills"]
            ],
            "pool_processes_after": pool_now,
            "ingestion": {
                "events": BIG_INGEST_EVENTS,
                "cursor_at_kill": marks.get("job_cursor_at_kill"),
                "missed": marks.get("job_missed"),
                "phase": job and job[0],
                "attempts": job and job[5],
                "added": job and job[2],
                "duplicates": job and job[3],
                "entries": entries,
                "distinct_entries": distinct,
                "recovery_seconds": round(job_done[0] - kill_times["ingestion"], 1)
                if job_done and "ingestion" in kill_times
                else None,
            },
            "compaction": {
                "events": BIG_COMPACT_EVENTS,
                "missed": marks.get("compaction_missed"),
                "status": compaction and compaction[0],
                "reason": compaction and compaction[1],
                "committed_checkpoints": committed,
                "summary_events": summaries,
                "recovery_seconds": round(compaction_done[0] - kill_times["compaction"], 1)
                if compaction_done and "compaction" in kill_times
                else None,
            },
        }
    )
    result["acknowledged_writes_lost"] += max(0, BIG_INGEST_EVENTS - distinct)
    result["duplicates"] += entries - distinct + max(0, summaries - 1)
    ingestion, comp = result["ingestion"], result["compaction"]
    failed = [f"worker kill: {name}" for name in result["data_failures"]]
    if result["errors"]:
        failed.append(f"worker kill: {sum(result['errors'].values())} requests not 2xx")
    if "ingestion" not in kill_times:
        failed.append(
            f"worker kill: the ingestion job was not caught running ({ingestion['missed']})"
        )
    if "compaction" not in kill_times:
        failed.append(f"worker kill: the compaction was not caught running ({comp['missed']})")
    if ingestion["phase"] != "completed" or entries != BIG_INGEST_EVENTS or distinct != entries:
        failed.append(
            f"worker kill: ingestion job {ingestion['phase']}, {entries} entries "
            f"({distinct} distinct) of {BIG_INGEST_EVENTS}"
        )
    if comp["status"] != "active" or committed != 1 or summaries != 1:
        failed.append(
            f"worker kill: compaction {comp['status']} ({comp['reason']}), {committed} "
            f"committed checkpoints, {summaries} summary events"
        )
    if pool_now != WORKER_CONCURRENCY:
        failed.append(f"worker kill: {pool_now} pool processes afterwards")
    result["failures"] = failed
    return result


def web_worker_kill(service: ServiceProcess, key: str, app: str) -> dict:
    """Three times, the gunicorn worker serving a batch append in flight (found by the
    client's port among the worker's connections) is SIGKILLed."""
    kills: list[dict] = []

    def kill(work: Workload) -> Callable[[], None]:
        def action() -> None:
            deadline = now() + 5
            while now() < deadline:
                for _slot, (port, since) in list(work.in_flight.items()):
                    if now() - since < 0.02:
                        continue
                    for worker in processes_of(service, "web_worker"):
                        try:
                            ports = {c.raddr.port for c in worker.net_connections("tcp") if c.raddr}
                        except psutil.Error:
                            continue
                        if port in ports:
                            killed_at = now()
                            os.kill(worker.pid, signal.SIGKILL)
                            replaced = None
                            while now() - killed_at < 30:
                                pids = {p.pid for p in processes_of(service, "web_worker")}
                                if worker.pid not in pids and len(pids) == WEB_WORKERS:
                                    replaced = now() - killed_at
                                    break
                                time.sleep(0.05)
                            kills.append(
                                {
                                    "at": killed_at,
                                    "pid": worker.pid,
                                    "replaced_after_s": None
                                    if replaced is None
                                    else round(replaced, 2),
                                }
                            )
                            return
                time.sleep(0.005)

        return action

    work = fault_run(
        service,
        key,
        app,
        "web",
        BATCH_MIX,
        lambda w: [(FAULT_SECONDS * (k + 1) / (WEB_KILLS + 2), kill(w)) for k in range(WEB_KILLS)],
    )
    result = common(work, service, len(kills))
    connection_errors = {k: n for k, n in result["errors"].items() if k.startswith("connection")}
    other = {k: n for k, n in result["errors"].items() if not k.startswith("connection")}
    last_kill = max((k["at"] for k in kills), default=work.end)
    ok_after = sum(1 for c in work.calls if c.ok and c.start > last_kill)
    result.update(
        {
            "kills": [{k: v for k, v in done.items() if k != "at"} for done in kills],
            "connection_errors": sum(connection_errors.values()),
            "other_errors": other,
            "killed_requests_applied_whole": result["check"].get("unacknowledged_applied_whole", 0),
            "ok_after_last_kill": ok_after,
        }
    )
    failed = [f"web worker kill: {name}" for name in result["data_failures"]]
    if other:
        failed.append(f"web worker kill: errors other than a lost connection: {other}")
    if len(kills) != WEB_KILLS:
        failed.append(f"web worker kill: {len(kills)} of {WEB_KILLS} kills landed on a request")
    if any(k["replaced_after_s"] is None for k in kills):
        failed.append("web worker kill: a killed worker was not replaced within 30 s")
    if not ok_after:
        failed.append("web worker kill: no request succeeded after the last kill")
    result["failures"] = failed
    return result
