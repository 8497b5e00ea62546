"""Load and faults: the whole stack under a bounded load, then the same load with faults.

``make bench`` runs it last, against a service of its own (in ``var/load``) so that its faults
disturb no other section; alone, ``python -m bench.load_bench`` does the same and rewrites the
"Load and faults" section of ``bench/BENCHMARKS.md``. It prints its figures as JSON and exits
non-zero naming every target that was not met.

The service runs as ``make run`` runs it (gunicorn with 3 workers of 4 threads, one Celery
worker with 2 pool processes, beat, the embedded PostgreSQL, the ``hashing`` embedder), with
a Redis started here on a free loopback port (one fault stops it: never the machine's own).
Leases are shortened so that a killed worker's work is taken over within a bench run:
``CTXADMIN_OUTBOX_LEASE_SECONDS`` and ``CTXADMIN_COMPACTION_LEASE_SECONDS``.

- Load: ``CLIENTS`` threads, each with one kept-alive HTTP/1.1 connection to 127.0.0.1 and
  nothing retried, send a mix of appends, context builds, memory searches, memory adds and
  ingestion admissions (``MIX``) to sessions and users they share, for ``WARMUP_SECONDS``
  and then ``LOAD_SECONDS`` (at most ``MAX_REQUESTS`` requests). Throughput and p50/p95/p99
  per endpoint over the measured part; every response must be the expected 2xx. The RSS of
  every web worker and Celery process is sampled each second. Afterwards the background
  work is waited for, every session is read back through the API and compared with what
  was acknowledged (each acknowledged event present once, at its acknowledged seq; seqs
  contiguous), and the database is compared with the acknowledged memory adds and ingestion
  jobs.
- Faults, each in a run of its own (``FAULT_SECONDS`` of the same load, the fault injected
  during it, then the same checks): PostgreSQL stopped (``pg_ctl stop -m fast``) and started
  again on its port; Redis stopped and started again; the Celery pool processes SIGKILLed
  while an ingestion job and then a compaction are running; a gunicorn worker SIGKILLed
  while it serves a large batch append (three times).
"""

from __future__ import annotations

import http.client
import json
import os
import random
import signal
import statistics
import sys
import textwrap
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlsplit

import psutil
import psycopg

from bench.machine import machine, postgres_version
from bench.sections import REPORT, splice
from bench.service import bench_service
from ctxadmin import stack
from ctxadmin.testing.service import ServiceProcess

SECTION = "## Load and faults"

CLIENTS = 12  # gunicorn serves 3 x 4 = 12 requests at once
WARMUP_SECONDS = 10
LOAD_SECONDS = 60
MAX_REQUESTS = 150_000  # a bound on any one run, whatever the rate
FAULT_SECONDS = 30
FAULT_MAX_REQUESTS = 60_000
USERS = 6
SESSIONS_PER_USER = 2
SEED_EVENTS = 40
SEED_MEMORIES = 30
COMPACTION_TOKENS = 4000  # the sessions' automatic compaction threshold: it runs under load
BATCH_EVENTS = 300  # the large batch appends of the web-worker fault
CLIENT_TIMEOUT_SECONDS = 60
IDLE_SECONDS = 2  # a connection idle this long is replaced before it is used again
BACKOFF_503_SECONDS = 0.1  # a client waits this long after a 503 (it is told Retry-After: 1)
SETTLE_SECONDS = 360  # background work of a run must end within this

WEB_WORKERS = 3
WEB_THREADS = 4
WORKER_CONCURRENCY = 2
OUTBOX_LEASE_SECONDS = 15
OUTBOX_SWEEP_SECONDS = 10  # the service's default
COMPACTION_LEASE_SECONDS = 20

WINDOW_SECONDS = 10  # RSS growth: mean of the first 10 s against the last 10 s
WEB_RSS_MB = 300
CELERY_RSS_MB = 500
GROWTH_PERCENT = 10
GROWTH_MB = 10

PG_DOWN_SECONDS = 5
REDIS_DOWN_SECONDS = 10
WEB_KILLS = 3
BIG_INGEST_EVENTS = 5000
BIG_COMPACT_EVENTS = 4000
RECOVERY_TARGET_SECONDS = 5  # after PostgreSQL is back, every request succeeds within this

MIX = (("append", 40), ("context", 20), ("memory_search", 20), ("memory_add", 10), ("ingest", 10))
BATCH_MIX = (
    ("append_batch", 15),
    ("append", 40),
    ("context", 15),
    ("memory_search", 15),
    ("memory_add", 8),
    ("ingest", 7),
)
ENDPOINTS = ("append", "append_batch", "context", "memory_search", "memory_add", "ingest_admit")
EXPECTED = {
    "append": {200, 201},
    "append_batch": {200, 201},
    "context": {200},
    "memory_search": {200},
    "memory_add": {201},
    "ingest_admit": {200, 202},  # 200: those events were admitted already (deduplicated)
}
CONTEXT_POLICY = {"budgets": {"max_tokens": 8000}, "overflow": "truncate"}
WORDS = (
    "the agent reviewed order status shipping invoice refund customer account balance report "
    "weekly summary database query latency retry cache memory context window budget tool "
    "result document search index ranking passage answer question follow clarify schedule "
    "meeting calendar reminder weather forecast temperature city travel booking flight hotel "
    "confirmation payment method update address preference language hiking paella dentist"
).split()


def now() -> float:
    return time.perf_counter()


def words(rng: random.Random, low: int, high: int) -> str:
    target, out, size = rng.randint(low, high), [], 0
    while size < target:
        word = rng.choice(WORDS)
        out.append(word)
        size += len(word) + 1
    return " ".join(out)


# ----------------------------------------------------------------------------- HTTP


class Client:
    """One kept-alive HTTP/1.1 connection (stdlib ``http.client``). Nothing is retried: a
    connection that fails is its request's error, and the next request opens a new one."""

    def __init__(self, base_url: str, key: str):
        parts = urlsplit(base_url)
        self.host, self.port = parts.hostname, parts.port
        self.headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
        self.connection: http.client.HTTPConnection | None = None
        self.used = 0.0

    def connect(self) -> int:
        """Open the connection if it is not (or has been idle long enough that the server
        may be closing it: gunicorn keeps an idle one for 5 s); its local port."""
        if self.connection is not None and now() - self.used > IDLE_SECONDS:
            self.close()
        if self.connection is None:
            self.connection = http.client.HTTPConnection(
                self.host, self.port, timeout=CLIENT_TIMEOUT_SECONDS
            )
        if self.connection.sock is None:
            self.connection.connect()
        return self.connection.sock.getsockname()[1]

    def close(self) -> None:
        if self.connection is not None:
            self.connection.close()
            self.connection = None

    def request(self, method: str, path: str, body=None) -> tuple[int, dict, str | None]:
        payload = None if body is None else json.dumps(body).encode()
        self.connect()
        try:
            self.connection.request(method, path, body=payload, headers=self.headers)
            response = self.connection.getresponse()
            data = response.read()
        except BaseException:
            self.close()
            raise
        self.used = now()
        if response.will_close:
            self.close()
        try:
            parsed = json.loads(data) if data else {}
        except ValueError:
            parsed = {"unparsed": data[:200].decode("utf-8", "replace")}
        return response.status, parsed, response.getheader("Retry-After")

    def get(self, path: str) -> dict:
        status, body, _retry = self.request("GET", path)
        if status != 200:
            raise RuntimeError(f"GET {path}: {status} {str(body)[:300]}")
        return body

    def send(self, method: str, path: str, body, expected: set[int]) -> dict:
        status, answer, _retry = self.request(method, path, body)
        if status not in expected:
            raise RuntimeError(f"{method} {path}: {status} {str(answer)[:300]}")
        return answer


@dataclass
class Call:
    endpoint: str
    start: float
    end: float
    outcome: str  # "ok", "http 503 database_unavailable", "connection RemoteDisconnected", ...

    @property
    def ok(self) -> bool:
        return self.outcome == "ok"


def outcome_of(endpoint: str, status: int, body: dict, retry_after: str | None) -> str:
    if status in EXPECTED[endpoint]:
        return "ok"
    error = body.get("error") if isinstance(body, dict) else None
    code = error.get("code") if isinstance(error, dict) else "no envelope"
    if status == 503 and code == "database_unavailable" and not retry_after:
        code += " without Retry-After"
    return f"http {status} {code}"


# ----------------------------------------------------------------------------- processes


def service_processes(service: ServiceProcess) -> list[tuple[psutil.Process, str]]:
    """The service's processes by role, told apart by their command lines: ``web_master``,
    ``web_worker`` (gunicorn's children), ``celery_worker`` (the worker's main process),
    ``celery_pool`` (its pool processes), ``celery_beat``, ``postgres`` (the postmaster)."""
    found = []
    for process in service.descendants():
        try:
            command = " ".join(process.cmdline())
            parent = process.parent()
            parent_command = " ".join(parent.cmdline()) if parent else ""
            name = process.name()
        except psutil.Error:
            continue
        if "gunicorn" in command:
            role = "web_worker" if "gunicorn" in parent_command else "web_master"
        elif "celery" in command and " worker " in command:
            in_worker = "celery" in parent_command and " worker " in parent_command
            role = "celery_pool" if in_worker else "celery_worker"
        elif "celery" in command and " beat " in command:
            role = "celery_beat"
        elif name == "postgres":
            role = "postgres"
        else:
            continue
        found.append((process, role))
    return found


def processes_of(service: ServiceProcess, role: str) -> list[psutil.Process]:
    return [process for process, found in service_processes(service) if found == role]


def cpu_seconds(service: ServiceProcess) -> dict[str, float]:
    """CPU time so far of the web processes, the Celery processes, PostgreSQL (with every
    backend) and this client process."""
    totals = {"web": 0.0, "celery": 0.0, "postgres": 0.0}
    for process, role in service_processes(service):
        part = role.split("_")[0]
        members = [process]
        if role == "postgres":
            members += process.children(recursive=True)
        for member in members:
            try:
                times = member.cpu_times()
            except psutil.Error:
                continue
            totals[part] += times.user + times.system
    mine = psutil.Process().cpu_times()
    totals["client"] = mine.user + mine.system
    return totals


class RssSampler(threading.Thread):
    """The RSS of every web worker and Celery process, every second."""

    ROLES = ("web_worker", "celery_worker", "celery_pool")

    def __init__(self, service: ServiceProcess):
        super().__init__(daemon=True)
        self.service = service
        self.samples: list[tuple[float, int, str, float]] = []  # (time, pid, role, MB)
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.is_set():
            at = now()
            for process, role in service_processes(self.service):
                if role in self.ROLES:
                    try:
                        rss = process.memory_info().rss / (1024 * 1024)
                    except psutil.Error:
                        continue
                    self.samples.append((at, process.pid, role, rss))
            self.halt.wait(1.0)

    def stop(self) -> None:
        self.halt.set()
        self.join()

    def summary(self, start: float, end: float) -> list[dict]:
        """Each process's peak over the run and its mean RSS over the first and the last
        ``WINDOW_SECONDS`` of [start, end] (a process alive in both windows is judged on
        growth; one replaced meanwhile only on its peak)."""
        by_pid: dict[int, list[tuple[float, str, float]]] = {}
        for at, pid, role, rss in self.samples:
            by_pid.setdefault(pid, []).append((at, role, rss))
        rows = []
        for pid, samples in sorted(by_pid.items(), key=lambda item: (item[1][0][1], item[0])):
            role = samples[0][1]
            first = [rss for at, _r, rss in samples if start <= at < start + WINDOW_SECONDS]
            last = [rss for at, _r, rss in samples if end - WINDOW_SECONDS <= at <= end]
            row = {
                "pid": pid,
                "role": role,
                "peak_mb": round(max(rss for _a, _r, rss in samples), 1),
                "samples": len(samples),
                "first_mb": round(statistics.fmean(first), 1) if first else None,
                "last_mb": round(statistics.fmean(last), 1) if last else None,
            }
            if first and last:
                growth = row["last_mb"] - row["first_mb"]
                allowed = row["first_mb"] * GROWTH_PERCENT / 100 + GROWTH_MB
                row["growth_mb"] = round(growth, 1)
                row["growth_ok"] = growth <= allowed
            limit = WEB_RSS_MB if role == "web_worker" else CELERY_RSS_MB
            row["limit_mb"] = limit
            row["peak_ok"] = row["peak_mb"] < limit
            rows.append(row)
        return rows


# ----------------------------------------------------------------------------- the workload


@dataclass
class SessionLedger:
    """What the service acknowledged for one session."""

    acked: dict[str, int] = field(default_factory=dict)  # event_id -> seq
    texts: set[str] = field(default_factory=set)  # acknowledged event ids with a text part
    unacked: list[tuple[list[str], str]] = field(default_factory=list)  # (ids, outcome)
    admitted: int = 0  # the last seq of the last acknowledged admission
    admission: threading.Lock = field(default_factory=threading.Lock)


class Workload:
    """One run's users, sessions, clients and what the service acknowledged to them."""

    def __init__(self, base_url: str, key: str, app: str, prefix: str, mix, budget: int):
        self.base_url, self.key, self.app, self.prefix = base_url, key, app, prefix
        self.mix = mix
        self.budget = budget
        self.users = [f"{prefix}-u{n}" for n in range(USERS)]
        self.sessions = [(u, f"s{k}") for u in self.users for k in range(SESSIONS_PER_USER)]
        self.ledger = {key_: SessionLedger() for key_ in self.sessions}
        self.memories: dict[str, str] = {}  # acknowledged memory id -> user
        self.memory_keys: set[str] = set()  # their idempotency keys
        self.jobs: set[str] = set()
        self.calls: list[Call] = []
        self.lock = threading.Lock()
        self.sent = 0
        self.start = self.end = self.stop_at = 0.0
        self.in_flight: dict[int, tuple[int, float]] = {}  # client -> (local port, since)

    # -- paths

    def user_url(self, user: str) -> str:
        return f"/api/v1/apps/{self.app}/users/{user}"

    def session_url(self, user: str, sid: str) -> str:
        return f"{self.user_url(user)}/sessions/{sid}"

    # -- events

    @staticmethod
    def text_event(rng: random.Random, event_id: str) -> dict:
        author = rng.choice(("user", "load_agent"))
        event = {
            "event_id": event_id,
            "invocation_id": f"inv-{event_id}",
            "author": author,
            "content": {
                "role": "user" if author == "user" else "model",
                "parts": [{"text": words(rng, 150, 500)}],
            },
        }
        if rng.random() < 0.1:
            event["actions"] = {
                "state_delta": {"topic": rng.choice(WORDS), "user:seen": rng.randint(1, 99)}
            }
        return event

    @staticmethod
    def tool_events(rng: random.Random, event_id: str) -> list[dict]:
        call_id = f"call-{event_id}"
        name = rng.choice(("search_docs", "lookup_order"))
        return [
            {
                "event_id": f"{event_id}-c",
                "invocation_id": f"inv-{event_id}",
                "author": "load_agent",
                "content": {
                    "role": "model",
                    "parts": [
                        {"function_call": {"id": call_id, "name": name, "args": {"q": "status"}}}
                    ],
                },
            },
            {
                "event_id": f"{event_id}-r",
                "invocation_id": f"inv-{event_id}",
                "author": "load_agent",
                "content": {
                    "role": "user",
                    "parts": [
                        {
                            "function_response": {
                                "id": call_id,
                                "name": name,
                                "response": {"result": words(rng, 100, 300)},
                            }
                        }
                    ],
                },
            },
        ]

    # -- one request

    def take(self) -> bool:
        with self.lock:
            if self.sent >= self.budget:
                return False
            self.sent += 1
            return True

    def call(self, client: Client, endpoint: str, method: str, path: str, body, slot: int):
        """Send one request and record it; the parsed body when it was the expected 2xx."""
        if endpoint == "append_batch" and slot >= 0:
            self.in_flight[slot] = (client.connect(), now())
        start = now()
        try:
            status, answer, retry_after = client.request(method, path, body)
            outcome = outcome_of(endpoint, status, answer, retry_after)
        except TimeoutError:
            outcome, answer = "connection timeout", None
        except (OSError, http.client.HTTPException) as exc:
            outcome, answer = f"connection {type(exc).__name__}", None
        finally:
            self.in_flight.pop(slot, None)
        end = now()
        with self.lock:
            self.calls.append(Call(endpoint, start, end, outcome))
        if outcome.startswith("http 503"):
            time.sleep(BACKOFF_503_SECONDS)
        return answer if outcome == "ok" else None, outcome

    # -- operations

    def op_append(self, client, rng, slot, counter, batch: int = 0) -> None:
        key = rng.choice(self.sessions)
        base = f"{self.prefix}-{slot}-{next(counter)}"
        if batch:
            events = [self.text_event(rng, f"{base}-{n}") for n in range(batch)]
        elif rng.random() < 0.2:
            events = self.tool_events(rng, base)
        else:
            events = [self.text_event(rng, base)]
        self.append(client, key, events, "append_batch" if batch else "append", slot)

    def append(self, client, key, events: list[dict], endpoint: str, slot: int) -> None:
        body = {"event": events[0]} if len(events) == 1 else {"events": events}
        answer, outcome = self.call(
            client, endpoint, "POST", f"{self.session_url(*key)}/events", body, slot
        )
        ledger = self.ledger[key]
        with self.lock:
            if answer is None:
                ledger.unacked.append(([e["event_id"] for e in events], outcome))
                return
            for stored in answer["events"]:
                ledger.acked[stored["event_id"]] = stored["seq"]
            ledger.texts.update(
                e["event_id"] for e in events if any("text" in p for p in e["content"]["parts"])
            )

    def op_context(self, client, rng, slot, counter) -> None:
        user, sid = rng.choice(self.sessions)
        body = {
            "current_input": {"role": "user", "parts": [{"text": words(rng, 40, 120)}]},
            "policy": CONTEXT_POLICY,
        }
        self.call(client, "context", "POST", f"{self.session_url(user, sid)}/context", body, slot)

    def op_memory_search(self, client, rng, slot, counter) -> None:
        user = rng.choice(self.users)
        body = {"query": " ".join(rng.sample(WORDS, 3)), "mode": "hybrid", "limit": 10}
        self.call(
            client, "memory_search", "POST", f"{self.user_url(user)}/memories/search", body, slot
        )

    def op_memory_add(self, client, rng, slot, counter) -> None:
        user = rng.choice(self.users)
        idempotency_key = f"{self.prefix}-m-{slot}-{next(counter)}"
        body = {
            "content": words(rng, 60, 300),
            "metadata": {"source": "load"},
            "idempotency_key": idempotency_key,
        }
        answer, _outcome = self.call(
            client, "memory_add", "POST", f"{self.user_url(user)}/memories", body, slot
        )
        if answer is not None:
            with self.lock:
                self.memories[answer["id"]] = user
                self.memory_keys.add(idempotency_key)

    def op_ingest(self, client, rng, slot, counter) -> None:
        """Admit a session's events after its last acknowledged admission: one admitter per
        session at a time, so the jobs of a session never overlap."""
        key = rng.choice(self.sessions)
        ledger = self.ledger[key]
        if not ledger.admission.acquire(blocking=False):
            return self.op_append(client, rng, slot, counter)
        try:
            with self.lock:
                newest = max(ledger.acked.values(), default=0)
            if newest <= ledger.admitted:
                return self.op_append(client, rng, slot, counter)
            user, sid = key
            body = {"session_id": sid, "after_seq": ledger.admitted}
            answer, _outcome = self.call(
                client,
                "ingest_admit",
                "POST",
                f"{self.user_url(user)}/memories/ingestions",
                body,
                slot,
            )
            if answer is not None:
                with self.lock:
                    ledger.admitted = answer["last_seq"]
                    self.jobs.add(answer["job_id"])
        finally:
            ledger.admission.release()

    # -- running

    def seed(self) -> None:
        """The run's sessions with ``SEED_EVENTS`` events each and ``SEED_MEMORIES`` memories
        per user, through the API (checked like the rest)."""
        client = Client(self.base_url, self.key)
        rng = random.Random(self.prefix)  # noqa: S311 - a reproducible load, not secrets
        for user, sid in self.sessions:
            client.send("POST", f"{self.user_url(user)}/sessions", {"session_id": sid}, {201})
            client.send(
                "PUT",
                f"{self.session_url(user, sid)}/compaction-policy",
                {"token_threshold": COMPACTION_TOKENS},
                {200},
            )
            events = [
                self.text_event(rng, f"{self.prefix}-seed-{user}-{sid}-{n}")
                for n in range(SEED_EVENTS)
            ]
            self.append(client, (user, sid), events, "append_batch", -1)
        counter = iter(range(10**9))
        for _user in self.users:
            for _ in range(SEED_MEMORIES):
                self.op_memory_add(client, rng, -1, counter)
        client.close()
        with self.lock:
            failed = errors_by_kind(self.calls)
            self.calls.clear()
        if failed:
            raise RuntimeError(f"seeding {self.prefix} failed: {failed}")

    def drive(self, seconds: float, marks: list[tuple[float, Callable[[], None]]] = ()) -> float:
        """``CLIENTS`` client threads for ``seconds``; each ``(offset, action)`` of ``marks``
        runs at its offset in a thread of its own. The start time."""
        start = now()
        self.stop_at = start + seconds
        threads = [
            threading.Thread(target=self._client, args=(slot,), daemon=True)
            for slot in range(CLIENTS)
        ]
        for thread in threads:
            thread.start()
        actions = []
        for offset, action in marks:
            actions.append(threading.Thread(target=_at, args=(start + offset, action), daemon=True))
            actions[-1].start()
        for thread in threads + actions:
            thread.join()
        return start

    def _client(self, slot: int) -> None:
        client = Client(self.base_url, self.key)
        rng = random.Random(f"{self.prefix}-{slot}")  # noqa: S311
        counter = iter(range(10**9))
        names = [name for name, _w in self.mix]
        weights = [weight for _n, weight in self.mix]
        while now() < self.stop_at and self.take():
            name = rng.choices(names, weights)[0]
            if name == "append_batch":
                self.op_append(client, rng, slot, counter, batch=BATCH_EVENTS)
            else:
                getattr(self, f"op_{name}")(client, rng, slot, counter)
        client.close()


def _at(when: float, action: Callable[[], None]) -> None:
    delay = when - now()
    if delay > 0:
        time.sleep(delay)
    action()


# ----------------------------------------------------------------------------- checks


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


# ----------------------------------------------------------------------------- figures


def percentiles(samples: list[float]) -> dict[str, float]:
    if len(samples) < 2:
        value = round(samples[0], 2) if samples else None
        return {"p50": value, "p95": value, "p99": value}
    cuts = statistics.quantiles(samples, n=100, method="inclusive")
    return {"p50": round(cuts[49], 2), "p95": round(cuts[94], 2), "p99": round(cuts[98], 2)}


def endpoint_table(calls: list[Call], seconds: float) -> dict:
    table = {}
    for endpoint in ENDPOINTS:
        mine = [c for c in calls if c.endpoint == endpoint]
        if not mine:
            continue
        ok = [(c.end - c.start) * 1000 for c in mine if c.ok]
        table[endpoint] = {
            "requests": len(mine),
            "per_second": round(len(mine) / seconds, 1),
            "errors": len(mine) - len(ok),
            **percentiles(ok),
        }
    return table


def errors_by_kind(calls: list[Call]) -> dict[str, int]:
    return dict(Counter(c.outcome for c in calls if not c.ok).most_common())


# ----------------------------------------------------------------------------- the load


def load_run(service: ServiceProcess, key: str, app: str) -> dict:
    work = Workload(service.base_url, key, app, "load", MIX, MAX_REQUESTS)
    work.seed()
    sampler = RssSampler(service)
    sampler.start()
    cpu: dict[str, dict] = {}
    marks = [(WARMUP_SECONDS, lambda: cpu.__setitem__("start", (now(), cpu_seconds(service))))]
    web_before = {p.pid for p in processes_of(service, "web_worker")}
    start = work.drive(WARMUP_SECONDS + LOAD_SECONDS, marks)
    end = now()
    cpu_end = cpu_seconds(service)
    sampler.stop()
    web_after = {p.pid for p in processes_of(service, "web_worker")}
    measured_from, cpu_start = cpu["start"]
    seconds = end - measured_from
    measured = [c for c in work.calls if c.start >= measured_from]
    warmup = [c for c in work.calls if c.start < measured_from]
    settled = settle(service, work)
    check = verify(service, work)
    rss = sampler.summary(measured_from, end)
    return {
        "clients": CLIENTS,
        "seconds": round(seconds, 1),
        "warmup_seconds": round(measured_from - start, 1),
        "requests": len(measured),
        "warmup_requests": len(warmup),
        "per_second": round(len(measured) / seconds, 1),
        "endpoints": endpoint_table(measured, seconds),
        "errors": errors_by_kind(work.calls),
        "cpu_seconds": {part: round(cpu_end[part] - cpu_start[part], 1) for part in cpu_end},
        "web_workers_replaced": len(web_before - web_after),
        "settle": settled,
        "check": check,
        "rss": rss,
        "failures": load_failures(work.calls, check, settled, rss),
    }


def load_failures(calls, check, settled, rss) -> list[str]:
    failed = []
    errors = errors_by_kind(calls)
    if errors:
        failed.append(f"load: {sum(errors.values())} requests not 2xx ({errors})")
    failed += [f"load: {name}" for name in data_failures(check, settled)]
    for row in rss:
        label = f"{row['role']} {row['pid']}"
        if not row["peak_ok"]:
            failed.append(f"load: {label} peak RSS {row['peak_mb']} MB >= {row['limit_mb']} MB")
        if row.get("growth_ok") is False:
            failed.append(f"load: {label} RSS grew {row['growth_mb']} MB")
    return failed


# ----------------------------------------------------------------------------- faults


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
    from bench.workload import conversation

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


# ----------------------------------------------------------------------------- the section


def start_service(var: Path) -> tuple[ServiceProcess, dict]:
    """The stack in ``var`` (emptied first) with a Redis of its own beside it;
    ``redis["server"]`` is that Redis (a fault replaces it)."""
    server = stack.LocalRedis(var.parent / f"{var.name}-redis")
    url = server.start()
    try:
        service = bench_service(
            var,
            {
                "CTXADMIN_WORKER_CONCURRENCY": str(WORKER_CONCURRENCY),
                "CTXADMIN_EMBEDDER": "hashing",
                "REDIS_URL": url,
                "CELERY_BROKER_URL": url,
                "CTXADMIN_OUTBOX_LEASE_SECONDS": str(OUTBOX_LEASE_SECONDS),
                "CTXADMIN_COMPACTION_LEASE_SECONDS": str(COMPACTION_LEASE_SECONDS),
            },
        )
    except BaseException:
        server.stop()
        raise
    return service, {"server": server}


def stop_service(service: ServiceProcess, redis: dict) -> None:
    try:
        _code, alive = service.stop()
        for process in alive:
            process.kill()
    finally:
        redis["server"].stop()


def measure(service: ServiceProcess, redis: dict) -> dict:
    app = f"load-{datetime.now(UTC):%Y%m%d%H%M%S}"
    service.manage("create_app", app)
    key = service.manage("create_api_key", "--app", app, "--scopes", "sessions", "memory").strip()
    started = now()
    results: dict = {}
    steps = (
        ("load", lambda: load_run(service, key, app)),
        ("postgres_restart", lambda: postgres_restart(service, key, app)),
        ("redis_outage", lambda: redis_outage(service, key, app, redis)),
        ("worker_kill", lambda: worker_kill(service, key, app)),
        ("web_worker_kill", lambda: web_worker_kill(service, key, app)),
    )
    for name, step in steps:
        print(f"load and faults: {name} …", flush=True)
        try:
            results[name] = step()
        except Exception as exc:  # a step that breaks is a failed target, and the rest runs
            results[name] = {"failures": [f"{name}: the run broke: {type(exc).__name__}: {exc}"]}
        print(json.dumps(results[name], indent=2, default=str), flush=True)
    results["section_seconds"] = round(now() - started)
    results["failures"] = [f for name, _s in steps for f in results[name].get("failures", [])]
    return results


def _met(ok: bool) -> str:
    return "yes" if ok else "**no**"


def _row(*cells) -> str:
    return "| " + " | ".join(str(cell) for cell in cells) + " |"


def _or_dash(value) -> str:
    return "—" if value is None else str(value)


def _kinds(errors: dict) -> str:
    return "; ".join(f"{kind}: {n}" for kind, n in errors.items()) or "none"


def report(results: dict, stamp: str) -> str:
    load = results["load"]
    lines = [SECTION, "", stamp, ""]
    if "endpoints" not in load:
        lines += ["The load run broke: " + "; ".join(load.get("failures", [])), ""]
    else:
        lines += _load_report(load)
    lines += _fault_report(results)
    failures = results["failures"]
    lines += [
        "",
        "Targets not met: " + ("none." if not failures else "; ".join(failures) + "."),
        "",
    ]
    return "\n".join(_wrapped(line) for line in "\n".join(lines).split("\n"))


def _wrapped(line: str) -> str:
    """A prose line wrapped as the rest of ``BENCHMARKS.md`` is (tables and headings kept)."""
    if not line or line.startswith(("|", "#")):
        return line
    indent = "  " if line.startswith("- ") else ""
    return textwrap.fill(
        line, 95, subsequent_indent=indent, break_long_words=False, break_on_hyphens=False
    )


def _load_report(load: dict) -> list[str]:
    endpoints = "\n".join(
        _row(name, f"{e['requests']:,}", e["per_second"], e["p50"], e["p95"], e["p99"], e["errors"])
        for name, e in load["endpoints"].items()
    )
    check = load["check"]
    cpu = load["cpu_seconds"]
    rss = "\n".join(
        _row(
            row["role"].replace("_", " "),
            row["pid"],
            row["peak_mb"],
            _or_dash(row["first_mb"]),
            _or_dash(row["last_mb"]),
            _or_dash(row.get("growth_mb")),
            f"< {row['limit_mb']} MB, growth <= {GROWTH_PERCENT}% + {GROWTH_MB} MB",
            _met(row["peak_ok"] and row.get("growth_ok", True)),
        )
        for row in load["rss"]
    )
    consistency = [
        ("requests not the expected 2xx (warm-up included)", sum(load["errors"].values()), 0),
        ("acknowledged events lost", check.get("acknowledged_lost", 0), 0),
        ("acknowledged events at another seq", check.get("acknowledged_moved", 0), 0),
        ("event ids stored twice", check.get("duplicated_event_ids", 0), 0),
        (
            "sessions with a seq gap, or a count unlike their events",
            check.get("seq_gaps", 0) + check.get("session_count_mismatch", 0),
            0,
        ),
        (
            "events stored that nobody acknowledged (compaction summaries aside)",
            check.get("unexplained_events", 0),
            0,
        ),
        (
            "acknowledged memory adds missing / stored twice",
            check.get("memories_lost", 0) + check.get("memories_duplicated", 0),
            0,
        ),
        (
            "admitted text events without their entry / entries twice",
            check.get("ingested_lost", 0) + check.get("ingested_duplicated", 0),
            0,
        ),
        (
            "jobs whose counts do not add up, or whose entries differ",
            check.get("jobs_count_mismatch", 0) + check.get("jobs_added_mismatch", 0),
            0,
        ),
    ]
    rows = "\n".join(
        _row(label, value, target, _met(value == target)) for label, value, target in consistency
    )
    jobs = f"{check.get('jobs_completed', 0)} of {check.get('jobs', 0)}"
    rows += "\n" + _row(
        "ingestion jobs completed",
        jobs,
        "all",
        _met(check.get("jobs_completed") == check.get("jobs")),
    )
    rows += "\n" + _row(
        "compactions pending or running once the work ended",
        check.get("checkpoints_in_flight", 0),
        0,
        _met(not check.get("checkpoints_in_flight")),
    )
    return [
        f"**Load**: {load['clients']} client threads (one kept-alive HTTP/1.1 connection each, "
        f"nothing retried) for {load['warmup_seconds']} s of warm-up and {load['seconds']} s "
        f"measured, at most {MAX_REQUESTS:,} requests, against `manage.py run` with gunicorn "
        f"{WEB_WORKERS} workers x {WEB_THREADS} threads, one Celery worker of "
        f"{WORKER_CONCURRENCY} pool processes and beat, the `hashing` embedder. The mix: "
        + ", ".join(f"{name} {weight}%" for name, weight in MIX)
        + f" ({USERS} users, {USERS * SESSIONS_PER_USER} sessions shared by every client; an "
        "append is one event or a function call with its response; a context build asks "
        "for 8,000 tokens with `truncate`; a search is hybrid, limit 10; an admission takes a "
        "session's events after its last admission).",
        "",
        f"{load['requests']:,} requests in {load['seconds']} s: "
        f"**{load['per_second']} requests/s**; "
        f"{load['check'].get('events_acknowledged', 0):,} events acknowledged in all (seeds "
        "and warm-up included). CPU used "
        f"over the measured part (s): web {cpu['web']}, Celery {cpu['celery']}, PostgreSQL "
        f"{cpu['postgres']}, this client {cpu['client']} (of {round(2 * load['seconds'])} "
        f"on 2 cores). Background work ended {load['settle']['seconds']} s after the load.",
        "",
        "| endpoint | requests | per second | p50 (ms) | p95 (ms) | p99 (ms) | errors |",
        "| --- | --- | --- | --- | --- | --- | --- |",
        endpoints,
        "",
        "Afterwards every session was read back through the API (`…/events?include_hidden=true`) "
        "and compared with every acknowledged append; memory entries and ingestion jobs were "
        "counted in the database.",
        "",
        "| check | value | target | met |",
        "| --- | --- | --- | --- |",
        rows,
        "",
        f"RSS, sampled every second (psutil, by command line); growth = mean of the last "
        f"{WINDOW_SECONDS} s minus mean of the first {WINDOW_SECONDS} s of the measured part "
        "(a process replaced meanwhile is judged on its peak). Web workers replaced during the "
        f"run (gunicorn's `max_requests`): {load['web_workers_replaced']}.",
        "",
        "| process | pid | peak (MB) | first 10 s (MB) | last 10 s (MB) | growth (MB) | target "
        "| met |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
        rss,
        "",
    ]


def _fault_report(results: dict) -> list[str]:
    rows = []
    names = {
        "postgres_restart": "PostgreSQL stopped (`pg_ctl stop -m fast`) and started again",
        "redis_outage": "Redis stopped and started again",
        "worker_kill": "Celery pool processes SIGKILLed mid-ingestion and mid-compaction",
        "web_worker_kill": "a gunicorn worker SIGKILLed mid-request (batch appends)",
    }
    for name, label in names.items():
        fault = results.get(name, {})
        if "requests" not in fault:
            rows.append(_row(label, "—", "—", "—", "—", "—", "—", "broke", "**no**"))
            continue
        rows.append(
            _row(
                label,
                f"{fault['requests']:,}",
                fault["faults_injected"],
                _kinds(fault["errors"]),
                fault["acknowledged_writes_lost"],
                fault["duplicates"],
                fault["partial_writes"],
                _recovery(name, fault),
                _met(not fault["failures"]),
            )
        )
    lines = [
        f"**Faults**: each in a run of its own, {FAULT_SECONDS} s of the same load with the "
        "fault injected during it, then the same checks. A client waits "
        f"{int(BACKOFF_503_SECONDS * 1000)} ms after a 503. Leases of the service: outbox "
        f"{OUTBOX_LEASE_SECONDS} s, compaction {COMPACTION_LEASE_SECONDS} s.",
        "",
        "| fault | requests | faults injected | errors by kind | acknowledged writes lost | "
        "duplicates | partial writes | recovery | met |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        *rows,
        "",
    ]
    lines += _fault_notes(results)
    return lines


def _recovery(name: str, fault: dict) -> str:
    if name == "postgres_restart":
        return (
            f"down {fault['outage_seconds']} s; first 2xx {fault['first_ok_after_restart_s']} s "
            f"after it was back; {fault['failed_after_restart']} failures after that"
        )
    if name == "redis_outage":
        return (
            f"down {fault['outage_seconds']} s; after it returned, every ingestion job had "
            f"ended in {fault['jobs_done_after_return_s']} s, every compaction in "
            f"{fault['compactions_done_after_return_s']} s"
        )
    if name == "worker_kill":
        return (
            f"ingestion job completed {fault['ingestion']['recovery_seconds']} s and "
            f"compaction committed {fault['compaction']['recovery_seconds']} s after the kill"
        )
    replaced = ", ".join(str(k["replaced_after_s"]) for k in fault["kills"])
    return f"worker replaced after {replaced} s"


def _fault_notes(results: dict) -> list[str]:
    notes = []
    pg = results.get("postgres_restart", {})
    if "during_outage" in pg:
        during = pg["during_outage"]
        notes.append(
            f"- PostgreSQL: {during['requests']} requests were sent while it was stopped or "
            f"starting: {during['503_envelope']} answered 503 `database_unavailable` with "
            f"`Retry-After`, {during['ok']} succeeded (before the shutdown took hold), "
            f"{during['other']} anything else. Requests failed after it was back: "
            f"{pg['failed_after_restart']}"
            + (
                f" ({_kinds(pg['failed_after_restart_kinds'])})"
                if pg["failed_after_restart"]
                else ""
            )
            + "; "
            "first 2xx per endpoint (s after the restart): "
            + ", ".join(f"{k} {v}" for k, v in sorted(pg["first_ok_by_endpoint_s"].items()))
            + ". ctxadmin was not restarted."
        )
    redis = results.get("redis_outage", {})
    if "during_outage" in redis:
        during = redis["during_outage"]
        p95 = ", ".join(
            f"{k} {v['p95']} ms (before: {redis['before_outage_endpoints'].get(k, {}).get('p95')})"
            for k, v in during["endpoints"].items()
        )
        notes.append(
            f"- Redis: {during['requests']} requests while it was down, {during['ok']} of them "
            f"2xx. p95 while down: {p95}; an admission waits for its publish to fail (the "
            "job row is written first). Jobs admitted and compactions queued meanwhile lost "
            "their messages with Redis; the beat's sweepers re-drove them once it was back "
            f"(outbox every {OUTBOX_SWEEP_SECONDS} s; a compaction once pending for 2 minutes, "
            "checked every 60 s)."
        )
    kill = results.get("worker_kill", {})
    if "ingestion" in kill:
        ing, comp = kill["ingestion"], kill["compaction"]
        notes.append(
            f"- Celery: the ingestion job of {ing['events']:,} events was killed with "
            f"{ing['cursor_at_kill']} events written; it ended `{ing['phase']}` after "
            f"{ing['attempts']} attempts with {ing['entries']:,} entries "
            f"({ing['distinct_entries']:,} distinct, {ing['duplicates']} duplicates counted). "
            "The compaction of "
            f"{comp['events']:,} events was killed while `running`; it ended `{comp['status']}` "
            f"with {comp['committed_checkpoints']} committed checkpoint and "
            f"{comp['summary_events']} summary event. Pool processes afterwards: "
            f"{kill['pool_processes_after']}."
        )
    web = results.get("web_worker_kill", {})
    if "kills" in web:
        notes.append(
            f"- Web: {len(web['kills'])} workers killed while serving a batch append of "
            f"{BATCH_EVENTS} events; {web['connection_errors']} requests lost their connection "
            f"(expected: they are not acknowledged), of which "
            f"{web['killed_requests_applied_whole']} had been applied whole (committed just "
            f"before the kill) and the rest not at all; {web['partial_writes']} partial. "
            f"{web['ok_after_last_kill']} requests succeeded after the last kill."
        )
    return notes


def run_section(command: str) -> list[str]:
    """Start the service, measure, stop it, splice the section into ``BENCHMARKS.md``; the
    targets not met."""
    service, redis = start_service(stack.var_dir() / "load")
    try:
        results = measure(service, redis)
        postgres = postgres_version(service.database_url)
    finally:
        stop_service(service, redis)
    box = machine()
    stamp = (
        f"Recorded by `{command}` on {datetime.now(UTC):%Y-%m-%d %H:%M} UTC ({box['cpu']}, "
        f"{box['cores']} cores, {box['memory_gib']} GiB, PostgreSQL {postgres}; one machine for "
        f"client, server and database). The section took {results['section_seconds']} s."
    )
    section = report(results, stamp)
    REPORT.write_text(splice(REPORT.read_text(), section, SECTION))
    print(json.dumps(results, indent=2, default=str))
    print(f"wrote the {SECTION[3:]!r} section of {REPORT}")
    return results["failures"]


def main() -> None:
    failures = run_section(".venv/bin/python -m bench.load_bench")
    if failures:
        sys.exit("load and fault targets not met: " + "; ".join(failures))


if __name__ == "__main__":
    main()
