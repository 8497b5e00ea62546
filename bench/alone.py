"""A benchmark run alone (``python -m bench.<module>``): a service of its own, the section
measured, stamped with the command and the machine, and written into ``BENCHMARKS.md``."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

from bench.machine import machine, postgres_version
from bench.sections import REPORT, splice
from bench.service import bench_service, stop_service
from ctxadmin import stack


def stamp(module: str, postgres: str) -> str:
    box = machine()
    return (
        f"\n\nRecorded by `.venv/bin/python -m bench.{module}` on "
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC ({box['cpu']}, {box['cores']} cores, "
        f"PostgreSQL {postgres}; one machine for client, server and database).\n"
    )


def run_alone(
    module: str,
    var: str,
    heading: str,
    measure: Callable,
    report: Callable[[dict], str],
    before: str,
) -> str:
    """Measure on a service started in ``var/<var>``, stop it, and replace the
    section at ``heading`` with the report, its stamp put before the first ``before``."""
    service = bench_service(stack.var_dir() / var)
    try:
        results = measure(service)
        postgres = postgres_version(service.database_url)
    finally:
        stop_service(service)
    section = report(results)
    section = section.replace(before, stamp(module, postgres) + "\n" + before.lstrip("\n"), 1)
    REPORT.write_text(splice(REPORT.read_text(), section, heading))
    print(section)
    return section
