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

import json
import sys
from datetime import UTC, datetime
from pathlib import Path

from bench.load.checks import data_failures, settle, verify
from bench.load.client import now
from bench.load.faults import postgres_restart, redis_outage, web_worker_kill, worker_kill
from bench.load.figures import endpoint_table, errors_by_kind
from bench.load.plan import (
    CLIENTS,
    COMPACTION_LEASE_SECONDS,
    LOAD_SECONDS,
    MAX_REQUESTS,
    MIX,
    OUTBOX_LEASE_SECONDS,
    WARMUP_SECONDS,
    WORKER_CONCURRENCY,
)
from bench.load.processes import RssSampler, cpu_seconds, processes_of
from bench.load.report import SECTION, report
from bench.load.traffic import Workload
from bench.machine import machine, postgres_version
from bench.sections import REPORT, splice
from bench.service import bench_service
from ctxadmin import stack
from ctxadmin.testing.service import ServiceProcess


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
