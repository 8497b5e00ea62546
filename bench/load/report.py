"""The "Load and faults" section of ``BENCHMARKS.md``: tables, recoveries and notes."""

from __future__ import annotations

import textwrap

from bench.load.plan import (
    BACKOFF_503_SECONDS,
    BATCH_EVENTS,
    COMPACTION_LEASE_SECONDS,
    FAULT_SECONDS,
    GROWTH_MB,
    GROWTH_PERCENT,
    MAX_REQUESTS,
    MIX,
    OUTBOX_LEASE_SECONDS,
    OUTBOX_SWEEP_SECONDS,
    SESSIONS_PER_USER,
    USERS,
    WEB_THREADS,
    WEB_WORKERS,
    WINDOW_SECONDS,
    WORKER_CONCURRENCY,
)

SECTION = "## Load and faults"


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
