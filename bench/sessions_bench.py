"""The session benchmarks of ``make bench``: appends (sequential, batched, concurrent), session
reads, context builds over 2,000 and 10,000 events, and the first page of a long session list,
through the API of a running service."""

from __future__ import annotations

import multiprocessing
import random
import statistics
import time

import psutil
import psycopg

from bench.client import Api
from bench.timing import percentiles, timed_ms
from bench.workload import conversation
from ctxadmin.testing.service import ServiceProcess

ROUNDS = 3  # throughput figures are the median of this many runs (a shared 2-core machine)


def _appender(base_url, key, app, index: int, sid: str, events: list[dict], barrier, ends):
    """One concurrent appender, in its own process (as separate clients would be)."""
    client = Api(base_url, key, app)
    barrier.wait()
    for event in events:
        client.append(f"u-conc-{index}", sid, [event])
    ends.put(time.perf_counter())


def measure(service: ServiceProcess, api: Api, args) -> dict:
    rng = random.Random(20240601)  # noqa: S311 - reproducible filler text
    results: dict = {}

    # Sequential single appends (the median of ROUNDS sessions; the first one is read back
    # below), then the same kind of events in batches of 100.
    sequential = []
    for round_number in range(ROUNDS):
        sid = "seq" if round_number == 0 else f"seq-{round_number}"
        api.create_session("u-seq", sid)
        events = list(conversation(rng, args.events, sid))
        started = time.perf_counter()
        for event in events:
            api.append("u-seq", sid, [event])
        sequential.append(round(args.events / (time.perf_counter() - started), 1))
    results["append_sequential_eps"] = statistics.median(sequential)
    results["append_sequential_eps_runs"] = sequential

    api.create_session("u-batch", "batch")
    batch_events = list(conversation(rng, args.events, "batch"))
    started = time.perf_counter()
    for index in range(0, len(batch_events), 100):
        api.append("u-batch", "batch", batch_events[index : index + 100])
    results["append_batch100_eps"] = round(args.events / (time.perf_counter() - started), 1)

    # Four concurrent appenders, each to its own session (as ADK's figure), each a client
    # process of its own; the median of ROUNDS runs, with the server's CPU per event.
    per_session = args.events // 4
    concurrent, cpu_runs = [], []
    for round_number in range(ROUNDS):
        sid = f"conc-{round_number}"
        streams = [list(conversation(rng, per_session, f"{sid}-{i}")) for i in range(4)]
        for i in range(4):
            api.create_session(f"u-conc-{i}", sid)
        context = multiprocessing.get_context("fork")
        barrier, ends = context.Barrier(5), context.Queue()
        workers = [
            context.Process(
                target=_appender,
                args=(service.base_url, api.key, api.app, i, sid, streams[i], barrier, ends),
            )
            for i in range(4)
        ]
        for worker in workers:
            worker.start()
        cpu_before = service_cpu_seconds(service)
        barrier.wait()
        started = time.perf_counter()
        finished = max(ends.get(timeout=600) for _ in workers)
        cpu_after = service_cpu_seconds(service)
        for worker in workers:
            worker.join()
        concurrent.append(round(4 * per_session / (finished - started), 1))
        cpu_runs.append(
            {
                part: round((cpu_after[part] - cpu_before[part]) * 1000 / (4 * per_session), 2)
                for part in cpu_after
            }
        )
    middle = concurrent.index(statistics.median_low(concurrent))
    results["append_concurrent_4_eps"] = statistics.median(concurrent)
    results["append_concurrent_4_eps_runs"] = concurrent
    results["append_concurrent_4_cpu_ms_per_event"] = cpu_runs[middle]

    # Reading the 2,000-event session, whole and its newest 50.
    session_url = f"{api.sessions('u-seq')}/seq"

    def get_full() -> None:
        body = api.get(session_url)
        assert len(body["events"]) == args.events

    def get_recent() -> None:
        body = api.get(session_url, num_recent_events=50)
        assert len(body["events"]) == 50

    results["get_session_2000_ms"] = timed_ms(get_full, 20)
    results["get_session_recent_50_ms"] = timed_ms(get_recent, 50)

    # Context build over the 2,000 events (everything selected: ADK's contents equivalent).
    current = {"role": "user", "parts": [{"text": "What did we decide about the refund?"}]}
    server_2000: list[float] = []

    def build_all() -> None:
        body = api.post(f"{session_url}/context", {"current_input": current})
        assert body["accounting"]["events"]["selected"] == args.events
        server_2000.append(body["accounting"]["build_ms"])

    results["context_2000_api_ms"] = timed_ms(build_all, 20)
    results["context_2000_server_ms"] = percentiles(server_2000[2:])

    # Context build over a 10,000-event session with a truncate policy.
    api.create_session("u-big", "big")
    big = list(conversation(rng, args.big_events, "big"))
    for index in range(0, len(big), 500):
        api.append("u-big", "big", big[index : index + 500])
    policy = {"budgets": {"max_tokens": 32000}, "overflow": "truncate"}
    server_10k: list[float] = []
    selected: list[int] = []

    def build_truncated() -> None:
        body = api.post(
            f"{api.sessions('u-big')}/big/context", {"current_input": current, "policy": policy}
        )
        server_10k.append(body["accounting"]["build_ms"])
        selected.append(body["accounting"]["events"]["selected"])

    results["context_10000_truncate_api_ms"] = timed_ms(build_truncated, 30)
    results["context_10000_truncate_server_ms"] = percentiles(server_10k[2:])
    results["context_10000_selected_events"] = selected[-1]

    # The first page of a user with 100,000 sessions.
    seed_sessions(service.database_url, api.app, "u-list", args.sessions)

    def first_page() -> None:
        body = api.get(api.sessions("u-list"))
        assert len(body["results"]) == 50 and body["next"]

    results["list_first_page_ms"] = timed_ms(first_page, 50)
    return results


def service_cpu_seconds(service: ServiceProcess) -> dict[str, float]:
    """CPU time used so far by the web processes and by PostgreSQL (all its backends)."""
    totals = {"web": 0.0, "postgres": 0.0}
    for process in service.descendants():  # gunicorn's master and workers are among them
        try:
            if "gunicorn" in " ".join(process.cmdline()):
                times = process.cpu_times()
                totals["web"] += times.user + times.system
            elif process.name() == "postgres":  # the postmaster: its backends are its children
                for member in [process, *process.children(recursive=True)]:
                    times = member.cpu_times()
                    totals["postgres"] += times.user + times.system
        except psutil.Error:
            continue
    return totals


def seed_sessions(database_url: str, app_name: str, user: str, count: int) -> None:
    """Insert ``count`` sessions for one user directly (creating them through the API would
    measure session creation, not listing)."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO sessions_app_session (app_id, user_id, session_id, state, revision, "
            "last_seq, event_count, total_bytes, token_estimate, created_at, updated_at) "
            "SELECT a.id, %s, 'list-' || g, '{}'::jsonb, 0, 0, 0, 0, 0, "
            "now() - make_interval(secs => g), now() - make_interval(secs => g) "
            "FROM ctxadmin_app a CROSS JOIN generate_series(1, %s) g WHERE a.name = %s",
            (user, count, app_name),
        )
        conn.execute("ANALYZE sessions_app_session")
