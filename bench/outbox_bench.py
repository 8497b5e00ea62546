"""The durable ingestion outbox: throughput with one and two workers, and time-to-queryable
under an offered load.

``make bench`` runs it against its service; alone, ``python -m bench.outbox_bench`` starts
a service of its own (in ``var/bench-outbox``) and rewrites the "Ingestion outbox" section of
``bench/BENCHMARKS.md``.

- Throughput: sessions of 500 text events each are stored first; then every session is
  admitted at once and the clock runs until every job has completed (events/s = events
  admitted / that time). Once with the service's one Celery worker process, once with a
  second worker process started beside it.
- Time-to-queryable: for 60 s, every 100 ms one of 10 users' sessions gets 10 new events
  (one append) and an admission of them (100 events/s offered). The last event of each
  admission carries a unique word; from the moment the admission is sent, probes search
  the user's memory for that word (lexical, every 50 ms) until it is returned. Afterwards
  every stored entry is counted: none may be missing, none may be there twice.
"""

from __future__ import annotations

import json
import os
import queue
import statistics
import subprocess
import threading
import time
from datetime import UTC, datetime

import psycopg

from bench.client import Api
from bench.sections import REPORT, splice
from bench.service import bench_client, bench_service, stop_service
from ctxadmin import stack

SESSION_EVENTS = 500
THROUGHPUT_SESSIONS = 20
LOAD_SECONDS = 60
LOAD_USERS = 10
TICK_SECONDS = 0.1
EVENTS_PER_TICK = 10
PROBE_INTERVAL = 0.05
PROBERS = 4
TARGET_P95_SECONDS = 2.0


def _events(prefix: str, start: int, count: int, token_last: str | None = None) -> list[dict]:
    events = []
    for n in range(start, start + count):
        words = f"{prefix} note {n}: the weekly plan mentions hiking, paella and a dentist visit"
        if token_last is not None and n == start + count - 1:
            words += f" {token_last}"
        author = "user" if n % 2 == 0 else "agent"
        events.append(
            {
                "event_id": f"{prefix}-{n}",
                "author": author,
                "content": {
                    "role": "user" if author == "user" else "model",
                    "parts": [{"text": words}],
                },
            }
        )
    return events


def _memories(api, user: str) -> str:
    return f"/api/v1/apps/{api.app}/users/{user}/memories"


def _admit(api, user: str, sid: str, after_seq: int = 0) -> dict:
    status, body = api.request(
        "POST", f"{_memories(api, user)}/ingestions", {"session_id": sid, "after_seq": after_seq}
    )
    if status != 202:
        raise RuntimeError(f"admission failed: {status} {str(body)[:300]}")
    return body


def _job(api, job_id: str) -> dict:
    return api.get(f"/api/v1/apps/{api.app}/outbox/jobs/{job_id}")


def _wait_completed(api, job_ids: list[str], timeout: float = 600) -> dict[str, dict]:
    deadline = time.monotonic() + timeout
    done: dict[str, dict] = {}
    while len(done) < len(job_ids):
        for job_id in job_ids:
            if job_id not in done:
                status = _job(api, job_id)
                if status["phase"] in ("completed", "failed", "cancelled"):
                    done[job_id] = status
        if time.monotonic() > deadline:
            raise RuntimeError(f"{len(job_ids) - len(done)} jobs did not end in {timeout} s")
        time.sleep(0.05)
    return done


def throughput(api, label: str) -> dict:
    users = [f"tp-{label}-{n}" for n in range(THROUGHPUT_SESSIONS)]
    for user in users:
        api.create_session(user, "s")
        api.append(user, "s", _events(user, 0, SESSION_EVENTS))
    started = time.perf_counter()
    job_ids = [_admit(api, user, "s")["job_id"] for user in users]
    admitted = time.perf_counter()
    ended = _wait_completed(api, job_ids)
    elapsed = time.perf_counter() - started
    events = SESSION_EVENTS * len(users)
    added = sum(status["added"] for status in ended.values())
    phases = {status["phase"] for status in ended.values()}
    return {
        "jobs": len(job_ids),
        "events": events,
        "added": added,
        "phases": sorted(phases),
        "admission_seconds": round(admitted - started, 2),
        "seconds": round(elapsed, 2),
        "events_per_second": round(events / elapsed, 1),
    }


def _prober(base_url: str, key: str, app: str, pending: queue.Queue, found: list, stop):
    api = Api(base_url, key, app)
    while not (stop.is_set() and pending.empty()):
        try:
            user, token, sent, next_at = pending.get(timeout=0.2)
        except queue.Empty:
            continue
        delay = next_at - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        status, body = api.request(
            "POST",
            f"{_memories(api, user)}/search",
            {"query": token, "mode": "lexical", "limit": 1},
        )
        now = time.perf_counter()
        if status == 200 and body["hits"] and token in body["hits"][0]["content"]:
            found.append(now - sent)
        elif now - sent > 120:
            found.append(float("inf"))
        else:
            pending.put((user, token, sent, now + PROBE_INTERVAL))


def time_to_queryable(api, database_url: str) -> dict:
    users = [f"ttq-{n}" for n in range(LOAD_USERS)]
    for user in users:
        api.create_session(user, "s")
    pending: queue.Queue = queue.Queue()
    found: list[float] = []
    stop = threading.Event()
    probers = [
        threading.Thread(
            target=_prober, args=(api_base(api), api.key, api.app, pending, found, stop)
        )
        for _ in range(PROBERS)
    ]
    for thread in probers:
        thread.start()
    loader = Api(api_base(api), api.key, api.app)
    next_seq = dict.fromkeys(users, 1)
    ticks = int(LOAD_SECONDS / TICK_SECONDS)
    job_ids: list[str] = []
    late = 0
    started = time.perf_counter()
    for tick in range(ticks):
        due = started + tick * TICK_SECONDS
        wait = due - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        else:
            late += 1
        user = users[tick % len(users)]
        token = f"zq{tick:05d}x"
        first = next_seq[user]
        loader.append(user, "s", _events(user, first, EVENTS_PER_TICK, token_last=token))
        sent = time.perf_counter()
        pending.put((user, token, sent, sent))
        job_ids.append(_admit(loader, user, "s", after_seq=first - 1)["job_id"])
        next_seq[user] = first + EVENTS_PER_TICK
    offered_seconds = time.perf_counter() - started
    stop.set()
    for thread in probers:
        thread.join()
    statuses = _wait_completed(api, job_ids, timeout=300)
    expected = ticks * EVENTS_PER_TICK
    with psycopg.connect(database_url) as connection:
        total, distinct = connection.execute(
            """
            SELECT count(*), count(DISTINCT (user_id, idempotency_key))
              FROM memory_memoryentry e JOIN ctxadmin_app a ON a.id = e.app_id
             WHERE a.name = %s AND e.user_id LIKE 'ttq-%%'
            """,
            [api.app],
        ).fetchone()
    finite = sorted(x for x in found if x != float("inf"))
    cuts = statistics.quantiles(finite, n=100, method="inclusive")
    return {
        "offered_events": expected,
        "offered_seconds": round(offered_seconds, 1),
        "offered_events_per_second": round(expected / offered_seconds, 1),
        "late_ticks": late,
        "admissions": len(job_ids),
        "probes": len(found),
        "never_found": len(found) - len(finite),
        "p50_seconds": round(cuts[49], 3),
        "p95_seconds": round(cuts[94], 3),
        "p99_seconds": round(cuts[98], 3),
        "max_seconds": round(finite[-1], 3),
        "jobs_completed": sum(1 for s in statuses.values() if s["phase"] == "completed"),
        "entries": total,
        "lost": expected - distinct,
        "duplicated": total - distinct,
    }


def api_base(api) -> str:
    return f"http://{api.host}:{api.port}"


def extra_worker(service) -> subprocess.Popen:
    """A second Celery worker process beside the service's, on its database and broker."""
    log = open(service.var / "log" / "bench-extra-worker.log", "wb")
    process = subprocess.Popen(
        stack.celery_worker_argv(
            f"bench-extra-{os.getpid()}@%h",
            1,
            "--without-gossip",
            "--without-mingle",
            loglevel="WARNING",
        ),
        cwd=stack.PROJECT_DIR,
        env=service.env,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    time.sleep(8)  # connected and consuming (no ping: the broker is the service's)
    return process


def measure(service, api) -> dict:
    """The outbox figures (the API key needs the ``sessions`` and ``memory`` scopes)."""
    results: dict = {"one_worker": throughput(api, "w1")}
    print(json.dumps(results["one_worker"]), flush=True)
    worker = extra_worker(service)
    try:
        results["two_workers"] = throughput(api, "w2")
        print(json.dumps(results["two_workers"]), flush=True)
    finally:
        stack.terminate_group(worker)
    results["time_to_queryable"] = time_to_queryable(api, service.database_url)
    print(json.dumps(results["time_to_queryable"]), flush=True)
    return results


def _met(ok: bool) -> str:
    return "yes" if ok else "**no**"


def _row(*cells) -> str:
    return "| " + " | ".join(str(cell) for cell in cells) + " |"


def report(results: dict) -> str:
    one, two, ttq = results["one_worker"], results["two_workers"], results["time_to_queryable"]
    scaling = two["events_per_second"] / one["events_per_second"]
    runs = "\n".join(
        _row(
            workers,
            run["jobs"],
            f"{run['events']:,}",
            f"{run['added']:,}",
            run["admission_seconds"],
            run["seconds"],
            f"{run['events_per_second']:,}",
        )
        for workers, run in ((1, one), (2, two))
    )
    p95_ok = ttq["p95_seconds"] <= TARGET_P95_SECONDS
    everything = ttq["jobs_completed"] == ttq["admissions"]
    targets = "\n".join(
        [
            _row("time-to-queryable p50", f"{ttq['p50_seconds']} s", "—", "—"),
            _row(
                "time-to-queryable p95",
                f"{ttq['p95_seconds']} s",
                f"<= {TARGET_P95_SECONDS} s",
                _met(p95_ok),
            ),
            _row(
                "time-to-queryable p99 / max",
                f"{ttq['p99_seconds']} / {ttq['max_seconds']} s",
                "—",
                "—",
            ),
            _row(
                "entries never found by search",
                ttq["never_found"],
                0,
                _met(ttq["never_found"] == 0),
            ),
            _row("events lost (offered, not stored)", ttq["lost"], 0, _met(ttq["lost"] == 0)),
            _row("events stored twice", ttq["duplicated"], 0, _met(ttq["duplicated"] == 0)),
            _row(
                "jobs completed",
                f"{ttq['jobs_completed']} of {ttq['admissions']}",
                "all",
                _met(everything),
            ),
        ]
    )
    return f"""## Ingestion outbox

Session events into memory through the durable outbox (`POST …/memories/ingestions`), drained
by the service's Celery worker processes (`hashing` embedder, computed in the worker; batches
of 500 events, one transaction each).

Throughput: {one["jobs"]} sessions of {SESSION_EVENTS} text events each, stored first, then all
admitted at once; the time runs from the first admission until every job has completed.

| workers | jobs | events | entries added | admitting (s) | total (s) | events/s |
| --- | --- | --- | --- | --- | --- | --- |
{runs}

Two workers drain {scaling:.2f}x as fast as one (PostgreSQL, the web server and both workers
share the machine's 2 cores).

Time-to-queryable: for {LOAD_SECONDS} s, every {int(TICK_SECONDS * 1000)} ms one of
{LOAD_USERS} users' sessions received {EVENTS_PER_TICK} events (one append) and an admission of
them: {ttq["offered_events"]:,} events offered at {ttq["offered_events_per_second"]} events/s
({ttq["admissions"]} admissions, {ttq["late_ticks"]} ticks late). The last event of each
admission carries a unique word; from the moment its admission was sent, a lexical search of
the user's memory for that word ran every {int(PROBE_INTERVAL * 1000)} ms until the entry came
back ({ttq["probes"]} probes; the time includes the probe interval).

| measure | value | target | met |
| --- | --- | --- | --- |
{targets}

For scale (cited, not measured here: both need a model provider): mem0's `add` takes 4 to 20
s per call and Graphiti about 12 s per message, since each extracts facts with an LLM before
it stores them; ctxadmin stores the events' text and makes it searchable without a model
call.
"""


SECTION = "## Ingestion outbox"


def main() -> None:
    service = bench_service(stack.var_dir() / "bench-outbox")
    try:
        api = bench_client(service, "outbox", "sessions", "memory")
        results = measure(service, api)
    finally:
        stop_service(service)
    section = report(results)
    stamp = (
        f"\n\nRecorded by `.venv/bin/python -m bench.outbox_bench` on "
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC (same machine).\n"
    )
    section = section.replace(
        "\n\nSession events into memory", stamp + "\nSession events into memory", 1
    )
    REPORT.write_text(splice(REPORT.read_text(), section, SECTION))
    print(section)


if __name__ == "__main__":
    main()
