"""``make bench``: measure ctxadmin through its HTTP API, and the peer in the same run.

Starts the whole service (``manage.py run``: embedded PostgreSQL 18 + pgvector, Redis,
Celery, gunicorn with 4 workers) in ``var/bench``, drives it with HTTP clients on loopback,
runs Google ADK's ``DatabaseSessionService`` on the same PostgreSQL server (``bench/adk_peer``),
and LangGraph's ``PostgresStore`` for memory search (``bench/langgraph_peer``), and writes both,
with their ratios, the command and the machine, to ``bench/BENCHMARKS.md`` (``--skip-peer``:
neither peer). Last, the load and fault runs (``bench/load_bench``) against a service of their
own.

    .venv/bin/python -m bench [--skip-peer] [--events 2000] [--big-events 10000]
                              [--sessions 100000]
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing
import os
import platform
import random
import re
import shutil
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlencode, urlsplit

import psutil
import psycopg

from bench import (
    cache_bench,
    invocation_bench,
    load_bench,
    locomo,
    memory_bench,
    outbox_bench,
    secret_bench,
)
from bench.workload import conversation
from ctxadmin import stack
from ctxadmin.testing.service import ServiceProcess

BENCH_DIR = Path(__file__).resolve().parent
REPORT = BENCH_DIR / "BENCHMARKS.md"
WEB_WORKERS = 3  # as make run
WEB_THREADS = 4
ROUNDS = 3  # throughput figures are the median of this many runs (a shared 2-core machine)


def percentiles(samples: list[float]) -> dict[str, float]:
    cuts = statistics.quantiles(samples, n=100, method="inclusive")
    return {"p50": round(cuts[49], 2), "p95": round(cuts[94], 2)}


def timed_ms(call, reps: int, warmup: int = 2) -> dict[str, float]:
    for _ in range(warmup):
        call()
    samples = []
    for _ in range(reps):
        started = time.perf_counter()
        call()
        samples.append((time.perf_counter() - started) * 1000)
    return percentiles(samples)


class Api:
    """A lean HTTP/1.1 client with one kept-alive connection (stdlib ``http.client``), so
    the figures are the service's, not a heavy client library's."""

    def __init__(self, base_url: str, key: str, app: str):
        parts = urlsplit(base_url)
        self.host, self.port = parts.hostname, parts.port
        self.headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
        self.key, self.app = key, app
        self.connection = http.client.HTTPConnection(self.host, self.port, timeout=60)

    def request(self, method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
        payload = None if body is None else json.dumps(body).encode()
        try:
            self.connection.request(method, path, body=payload, headers=self.headers)
            response = self.connection.getresponse()
        except (http.client.HTTPException, ConnectionError):
            # The server closed the kept-alive connection (e.g. max_requests): reconnect once.
            self.connection.close()
            self.connection.request(method, path, body=payload, headers=self.headers)
            response = self.connection.getresponse()
        data = response.read()
        return response.status, (json.loads(data) if data else {})

    def get(self, path: str, **params) -> dict:
        query = f"?{urlencode(params)}" if params else ""
        status, body = self.request("GET", path + query)
        if status != 200:
            raise RuntimeError(f"GET {path} failed: {status} {str(body)[:300]}")
        return body

    def post(self, path: str, body: dict) -> dict:
        status, answer = self.request("POST", path, body)
        if status not in (200, 201):
            raise RuntimeError(f"POST {path} failed: {status} {str(answer)[:300]}")
        return answer

    def sessions(self, user: str) -> str:
        return f"/api/v1/apps/{self.app}/users/{user}/sessions"

    def create_session(self, user: str, session_id: str) -> None:
        self.post(self.sessions(user), {"session_id": session_id})

    def append(self, user: str, sid: str, events: list[dict]) -> None:
        body = {"event": events[0]} if len(events) == 1 else {"events": events}
        self.post(f"{self.sessions(user)}/{sid}/events", body)


def _appender(base_url, key, app, index: int, sid: str, events: list[dict], barrier, ends):
    """One concurrent appender, in its own process (as separate clients would be)."""
    client = Api(base_url, key, app)
    barrier.wait()
    for event in events:
        client.append(f"u-conc-{index}", sid, [event])
    ends.put(time.perf_counter())


def measure_ctxadmin(service: ServiceProcess, api: Api, args) -> dict:
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


def machine() -> dict:
    cpu = "unknown"
    try:
        cpu = next(
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        )
    except (OSError, StopIteration):
        pass
    memory_kb = 0
    try:
        memory_kb = int(re.search(r"MemTotal:\s+(\d+)", Path("/proc/meminfo").read_text()).group(1))
    except (OSError, AttributeError):
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gib": round(memory_kb / 1024 / 1024, 1),
        "python": platform.python_version(),
        "os": platform.platform(),
    }


def postgres_version(database_url: str) -> str:
    with psycopg.connect(database_url) as conn:
        return conn.execute("SHOW server_version").fetchone()[0]


def ratio(ours: float, theirs: float, higher_is_better: bool) -> float:
    return round(ours / theirs if higher_is_better else theirs / ours, 2)


def write_report(
    ours: dict,
    peer: dict | None,
    info: dict,
    args,
    compaction: dict,
    memory: dict,
    outbox: dict,
    cache: dict,
    invocations: dict,
) -> None:
    rows = []

    def row(label, our_value, peer_value, higher, target, met):
        peer_cell = "—" if peer_value is None else peer_value
        ratio_cell = "—" if peer_value is None else f"{ratio(our_value, peer_value, higher)}x"
        rows.append(f"| {label} | {our_value} | {peer_cell} | {ratio_cell} | {target} | {met} |")

    p = peer or {}
    adk = lambda key, sub=None: (p.get(key) or {}).get(sub) if sub else p.get(key)  # noqa: E731

    def check(condition) -> str:
        return "—" if condition is None else ("yes" if condition else "**no**")

    seq, peer_seq = ours["append_sequential_eps"], adk("append_sequential_eps")
    row(
        "append, sequential single events (events/s)",
        seq,
        peer_seq,
        True,
        ">= 0.8x ADK",
        check(peer_seq and seq >= 0.8 * peer_seq),
    )
    conc, peer_conc = ours["append_concurrent_4_eps"], adk("append_concurrent_4_eps")
    row(
        "append, 4 concurrent appenders (events/s, total)",
        conc,
        peer_conc,
        True,
        ">= 1.5x ADK",
        check(peer_conc and conc >= 1.5 * peer_conc),
    )
    batch = ours["append_batch100_eps"]
    row(
        "append, batches of 100 (events/s) vs ADK sequential",
        batch,
        peer_seq,
        True,
        ">= 10x ADK",
        check(peer_seq and batch >= 10 * peer_seq),
    )
    get_full, peer_get = ours["get_session_2000_ms"]["p50"], adk("get_session_2000_ms", "p50")
    row(
        "GET session of 2,000 events (p50 ms)",
        get_full,
        peer_get,
        False,
        ">= 3x faster",
        check(peer_get and peer_get >= 3 * get_full),
    )
    recent, peer_recent = (
        ours["get_session_recent_50_ms"]["p50"],
        adk("get_session_recent_50_ms", "p50"),
    )
    row(
        "GET newest 50 events (p50 ms)", recent, peer_recent, False, "<= 10 ms", check(recent <= 10)
    )
    page, peer_list = ours["list_first_page_ms"]["p50"], adk("list_sessions_5000_ms", "p50")
    row(
        f"list first page, user with {args.sessions:,} sessions (p50 ms; ADK: all of 5,000)",
        page,
        peer_list,
        False,
        "<= 10 ms",
        check(page <= 10),
    )
    ctx_api, peer_ctx = ours["context_2000_api_ms"]["p50"], adk("contents_2000_ms", "p50")
    row(
        "context over 2,000 events, through the API (p50 ms) vs ADK get_session + contents",
        ctx_api,
        peer_ctx,
        False,
        ">= 5x faster",
        check(peer_ctx and peer_ctx >= 5 * ctx_api),
    )
    ctx_server = ours["context_2000_server_ms"]["p50"]
    row("context over 2,000 events, server-side (p50 ms)", ctx_server, peer_ctx, False, "—", "—")
    big_server = ours["context_10000_truncate_server_ms"]
    row(
        f"context over {args.big_events:,} events, truncate, server-side (p50 ms)",
        big_server["p50"],
        None,
        False,
        "< 50 ms",
        check(big_server["p50"] < 50),
    )
    big_api = ours["context_10000_truncate_api_ms"]
    row(
        f"context over {args.big_events:,} events, truncate, through the API (p50 ms)",
        big_api["p50"],
        None,
        False,
        "—",
        "—",
    )

    peer_notes = "\n".join(f"- {note}" for note in (p.get("notes") or ["The peer was skipped."]))
    detail = json.dumps(
        {"ctxadmin": ours, "adk": {k: v for k, v in p.items() if k != "notes"}}, indent=2
    )
    REPORT.write_text(
        f"""# Benchmarks

Recorded by `make bench` (`.venv/bin/python -m bench {" ".join(args.raw)}`) on
{info["date"]}. Figures change with the machine; rerun to refresh them.

**Machine**: {info["machine"]["cpu"]}, {info["machine"]["cores"]} cores,
{info["machine"]["memory_gib"]} GiB, {info["machine"]["os"]}, Python {info["machine"]["python"]},
PostgreSQL {info["postgres"]} (embedded, pgvector), one machine for client, server and database.

**ctxadmin** ran as `make run` runs it (gunicorn, {WEB_WORKERS} workers of
{WEB_THREADS} threads, one Celery worker and beat), measured through its HTTP API on 127.0.0.1
by HTTP/1.1 clients keeping their connection alive (stdlib `http.client`; the 4 concurrent
appenders are 4 client processes), every request authenticated with an API key.
"Server-side" is the time `build_context` reports in the response's accounting.
**ADK** is `google-adk`'s `DatabaseSessionService` on the same PostgreSQL server
(`postgresql+asyncpg`), in-process: no HTTP at all.

## Sessions and the context builder

| measure | ctxadmin | ADK | ratio (ctxadmin/ADK, higher is better) | target | met |
| --- | --- | --- | --- | --- | --- |
{chr(10).join(rows)}

Append throughputs are the median of {ROUNDS} runs on each side (all runs: ctxadmin
sequential {ours["append_sequential_eps_runs"]}, concurrent {ours["append_concurrent_4_eps_runs"]};
ADK sequential {p.get("append_sequential_eps_runs")}, concurrent
{p.get("append_concurrent_4_eps_runs")}): this machine is shared and run-to-run spread is
large. Server CPU per appended event during the median concurrent run: web workers
{ours["append_concurrent_4_cpu_ms_per_event"]["web"]} ms, PostgreSQL
{ours["append_concurrent_4_cpu_ms_per_event"]["postgres"]} ms. With the clients on the same
2 cores, that CPU is the ceiling of concurrent single-event appends here; batches are how a
busy writer goes faster (one round trip and one transaction per batch).

The conversation is the same on both sides: turns alternate `user, call, response, model`
and `user, model` (text of 200-600 bytes; a function call and its response per tool unit);
every tenth event carries a state delta with session and `user:` keys. ctxadmin's 10,000-event
build uses `{{"budgets": {{"max_tokens": 32000}}, "overflow": "truncate"}}` and selected
{ours["context_10000_selected_events"]} events.

### Peer notes

{peer_notes}

### All figures

```json
{detail}
```

{locomo.report(compaction)}
### Compaction figures

```json
{json.dumps({k: v for k, v in compaction.items() if k != "conversations"}, indent=2)}
```

{memory_bench.report(memory)}

{outbox_bench.report(outbox)}

{cache_bench.report(cache)}

{invocation_bench.report(invocations)}"""
    )


def fresh_var(var: Path) -> Path:
    """``var`` emptied (its PostgreSQL stopped first, if an earlier run left it running): each
    run measures a database of its own, as a table still holding an earlier run's rows changes
    what its indexes cost."""
    if (var / "pgdata").exists():
        stack.EmbeddedPostgres(var / "pgdata").stop()
    shutil.rmtree(var, ignore_errors=True)
    return var


def bench_service(var: Path, extra_env: dict[str, str] | None = None) -> ServiceProcess:
    """The whole stack as ``make run`` runs it (its web workers and threads), started in
    ``var`` (emptied first) and up; ``extra_env``: settings of its own
    (``CTXADMIN_EMBEDDER``, …)."""
    fresh_var(var)
    service = ServiceProcess(
        var,
        stack.free_port(),
        var / "service.log",
        extra_env={
            "CTXADMIN_WEB_WORKERS": str(WEB_WORKERS),
            "CTXADMIN_WEB_THREADS": str(WEB_THREADS),
            "CTXADMIN_WORKER_CONCURRENCY": "1",
            **(extra_env or {}),
        },
    )
    try:
        service.wait_up()
    except BaseException:
        service.stop()
        raise
    return service


def bench_client(service: ServiceProcess, prefix: str, *scopes: str) -> Api:
    """A new app of this run, and a client holding a key with ``scopes``."""
    app = f"{prefix}-{datetime.now(UTC):%Y%m%d%H%M%S}"
    service.manage("create_app", app)
    key = service.manage("create_api_key", "--app", app, "--scopes", *scopes).strip()
    return Api(service.base_url, key, app)


def main() -> None:
    parser = argparse.ArgumentParser(description="ctxadmin benchmarks")
    parser.add_argument("--events", type=int, default=2000)
    parser.add_argument("--big-events", type=int, default=10000)
    parser.add_argument("--sessions", type=int, default=100000)
    parser.add_argument("--skip-peer", action="store_true")
    parser.add_argument("--memory-big", type=int, default=100000)
    parser.add_argument("--memory-small", type=int, default=10000)
    args = parser.parse_args()
    args.raw = sys.argv[1:]

    # The service reaches its Gemini cache provider here: it must answer before it starts.
    fake_gemini = cache_bench.start_provider()
    service = bench_service(stack.var_dir() / "bench", cache_bench.service_env(fake_gemini))
    try:
        api = bench_client(service, "bench", "sessions", "memory")
        print("measuring ctxadmin …", flush=True)
        ours = measure_ctxadmin(service, api, args)
        print(json.dumps(ours, indent=2), flush=True)
        print("replaying LoCoMo with automatic compaction …", flush=True)
        compaction = locomo.measure(api)
        print(
            json.dumps({k: v for k, v in compaction.items() if k != "conversations"}, indent=2),
            flush=True,
        )
        print("measuring memory search …", flush=True)
        memory = memory_bench.measure(
            service,
            api,
            big=args.memory_big,
            small=args.memory_small,
            skip_langgraph=args.skip_peer,
        )
        print("measuring the ingestion outbox …", flush=True)
        outbox = outbox_bench.measure(service, api)
        print("measuring the prefix-cache registry …", flush=True)
        cache = cache_bench.measure(service, bench_client(service, "cache", "cache"), fake_gemini)
        print("measuring invocations …", flush=True)
        invocations = invocation_bench.measure(bench_client(service, "invoke", "sessions"))
        peer = None
        if not args.skip_peer:
            from bench import adk_peer

            print("measuring the peer (ADK DatabaseSessionService) …", flush=True)
            peer = adk_peer.run(service.database_url, events=args.events)
            print(json.dumps({k: v for k, v in peer.items() if k != "notes"}, indent=2), flush=True)
        info = {
            "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": machine(),
            "postgres": postgres_version(service.database_url),
        }
    finally:
        _code, alive = service.stop()
        for process in alive:
            process.kill()
        fake_gemini.stop()
    write_report(ours, peer, info, args, compaction, memory, outbox, cache, invocations)
    print(f"wrote {REPORT}")
    print("measuring the secret detectors …", flush=True)
    secret_bench.run_section("make bench")  # in process: no service
    # In var/load, with a Redis of its own: its faults disturb nothing measured above.
    load_failures = load_bench.run_section("make bench")
    if cache["failures"]:
        sys.exit("prefix cache targets not met: " + "; ".join(cache["failures"]))
    if load_failures:
        sys.exit("load and fault targets not met: " + "; ".join(load_failures))


if __name__ == "__main__":
    main()
