"""What a report says the figures were measured on: the machine and the PostgreSQL server."""

from __future__ import annotations

import os
import platform
import re
from pathlib import Path

import psycopg


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
