"""After a run: waiting for its background work, then every acknowledged write checked
against what the API and the database hold."""

from __future__ import annotations

import time
from collections import Counter
from urllib.parse import urlsplit

import psycopg

from bench.load.client import Client, now
from bench.load.plan import SETTLE_SECONDS
from bench.load.traffic import Workload
from ctxadmin.testing.service import ServiceProcess


def database(service: ServiceProcess):
    return psycopg.connect(service.database_url, autocommit=True, connect_timeout=10)


def settle(service: ServiceProcess, work: Workload, timeout: float = SETTLE_SECONDS) -> dict:
    """Wait until the run's ingestion jobs have ended and none of its sessions has a
    compaction pending or running: the seconds until the jobs had, until the compactions had,
    and what was left if either did not."""
    started = now()
    done: dict[str, float] = {}
    while True:
        with database(service) as conn:
            jobs = conn.execute(
                """
                SELECT count(*) FROM memory_outboxjob j JOIN ctxadmin_app a ON a.id = j.app_id
                 WHERE a.name = %s AND j.user_id = ANY(%s)
                   AND j.phase IN ('pending', 'running', 'retry')
                """,
                [work.app, work.users],
            ).fetchone()[0]
            compactions = conn.execute(
                """
                SELECT count(*) FROM sessions_app_checkpoint c
                  JOIN sessions_app_session s ON s.id = c.session_id
                  JOIN ctxadmin_app a ON a.id = s.app_id
                 WHERE a.name = %s AND s.user_id = ANY(%s) AND c.status IN ('pending', 'running')
                """,
                [work.app, work.users],
            ).fetchone()[0]
        waited = now() - started
        for name, left in (("jobs_done_s", jobs), ("compactions_done_s", compactions)):
            if left == 0:
                done.setdefault(name, round(waited, 1))
        if len(done) == 2 or waited > timeout:
            return {
                "seconds": round(waited, 1),
                "settled": len(done) == 2,
                **done,
                "active_jobs_left": jobs,
                "compactions_in_flight_left": compactions,
            }
        time.sleep(1)


def read_events(client: Client, path: str) -> list[dict]:
    """Every event of a session, hidden ones included, through the API (pages of 200)."""
    events, url = [], f"{path}/events?include_hidden=true&limit=200"
    while url:
        page = client.get(url)
        events.extend(page["results"])
        nxt = page.get("next")
        url = None if not nxt else urlsplit(nxt).path + "?" + urlsplit(nxt).query
    return events


def verify(service: ServiceProcess, work: Workload) -> dict:
    """Compare what the service holds with what it acknowledged (see the module's doc)."""
    client = Client(work.base_url, work.key)
    result = Counter()
    for key in work.sessions:
        ledger = work.ledger[key]
        path = work.session_url(*key)
        events = read_events(client, path)
        session = client.get(f"{path}?num_recent_events=0")
        seqs = [event["seq"] for event in events]
        ids = Counter(event["event_id"] for event in events)
        stored = {event["event_id"]: event for event in events}
        result["sessions"] += 1
        result["events_stored"] += len(events)
        result["events_acknowledged"] += len(ledger.acked)
        result["duplicated_event_ids"] += sum(n - 1 for n in ids.values() if n > 1)
        result["seq_gaps"] += int(seqs != list(range(1, len(seqs) + 1)))
        result["session_count_mismatch"] += int(
            session.get("event_count", len(events)) != len(events)
        )
        for event_id, seq in ledger.acked.items():
            if event_id not in stored:
                result["acknowledged_lost"] += 1
            elif stored[event_id]["seq"] != seq:
                result["acknowledged_moved"] += 1
        unacked_ids = set()
        for batch, _outcome in ledger.unacked:
            present = sum(1 for event_id in batch if event_id in stored)
            unacked_ids.update(batch)
            result["unacknowledged_requests"] += 1
            if present == len(batch):
                result["unacknowledged_applied_whole"] += 1
            elif present:
                result["partial_writes"] += 1
        for event_id, event in stored.items():
            if event_id in ledger.acked or event_id in unacked_ids:
                continue
            if event.get("author") == "ctxadmin" and event_id.startswith("compaction-"):
                result["compaction_summaries"] += 1
            else:
                result["unexplained_events"] += 1
    client.close()

    with database(service) as conn:
        rows = conn.execute(
            """
            SELECT e.user_id, e.session_id, e.event_id, e.idempotency_key, e.id::text
              FROM memory_memoryentry e JOIN ctxadmin_app a ON a.id = e.app_id
             WHERE a.name = %s AND e.user_id = ANY(%s)
            """,
            [work.app, work.users],
        ).fetchall()
        # Every job of the run's users: an admission that was not acknowledged (its
        # connection lost) may still have made one.
        jobs = conn.execute(
            """
            SELECT j.id::text, j.phase, j.events, j.added, j.duplicates, j.skipped
              FROM memory_outboxjob j JOIN ctxadmin_app a ON a.id = j.app_id
             WHERE a.name = %s AND j.user_id = ANY(%s)
            """,
            [work.app, work.users],
        ).fetchall()
        checkpoints = conn.execute(
            """
            SELECT c.status, count(*) FROM sessions_app_checkpoint c
              JOIN sessions_app_session s ON s.id = c.session_id
              JOIN ctxadmin_app a ON a.id = s.app_id
             WHERE a.name = %s AND s.user_id = ANY(%s) GROUP BY c.status
            """,
            [work.app, work.users],
        ).fetchall()
    by_id = {row[4] for row in rows}
    keys = Counter(row[3] for row in rows if row[3] and not row[3].startswith("session:"))
    result["memories_acknowledged"] = len(work.memories)
    result["memories_lost"] = sum(1 for mid in work.memories if mid not in by_id)
    result["memories_duplicated"] = sum(n - 1 for n in keys.values() if n > 1)
    result["memory_keys_missing"] = sum(1 for k in work.memory_keys if k not in keys)
    from_sessions = Counter((row[0], row[1], row[2]) for row in rows if row[2])
    result["ingested_entries"] = sum(from_sessions.values())
    result["ingested_duplicated"] = sum(n - 1 for n in from_sessions.values() if n > 1)
    for (user, sid), ledger in work.ledger.items():
        for event_id in ledger.texts:
            if ledger.acked.get(event_id, 0) <= ledger.admitted and (
                (user, sid, event_id) not in from_sessions
            ):
                result["ingested_lost"] += 1
    result["jobs_acknowledged"] = len(work.jobs)
    result["jobs"] = len(jobs)
    result["jobs_completed"] = sum(1 for job in jobs if job[1] == "completed")
    result["jobs_count_mismatch"] = sum(1 for job in jobs if job[2] != job[3] + job[4] + job[5])
    result["jobs_added"] = sum(job[3] for job in jobs)
    result["jobs_duplicates"] = sum(job[4] for job in jobs)
    result["jobs_missing"] = len(work.jobs - {job[0] for job in jobs})
    # Each entry of a session's event was inserted by exactly one job.
    result["jobs_added_mismatch"] = abs(result["jobs_added"] - result["ingested_entries"])
    statuses = dict(checkpoints)
    result["checkpoints_committed"] = statuses.get("active", 0) + statuses.get("superseded", 0)
    result["checkpoints_failed"] = statuses.get("failed", 0)
    result["checkpoints_in_flight"] = statuses.get("pending", 0) + statuses.get("running", 0)
    return dict(result)


def data_failures(check: dict, settled: dict) -> list[str]:
    """The checks that must be 0 (or equal) after any run, named when they are not."""
    zero = (
        "acknowledged_lost",
        "acknowledged_moved",
        "duplicated_event_ids",
        "seq_gaps",
        "session_count_mismatch",
        "partial_writes",
        "unexplained_events",
        "memories_lost",
        "memories_duplicated",
        "memory_keys_missing",
        "ingested_duplicated",
        "ingested_lost",
        "jobs_count_mismatch",
        "jobs_missing",
        "jobs_added_mismatch",
        "checkpoints_in_flight",
    )
    failed = [f"{name} = {check[name]}" for name in zero if check.get(name)]
    if check.get("jobs_completed") != check.get("jobs"):
        failed.append(f"jobs completed {check.get('jobs_completed')} of {check.get('jobs')}")
    if not settled["settled"]:
        failed.append(f"background work not ended within {SETTLE_SECONDS} s")
    return failed
