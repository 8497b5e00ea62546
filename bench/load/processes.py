"""The service's processes by role (web workers, Celery, PostgreSQL): their CPU time and a
sampler of their RSS."""

from __future__ import annotations

import statistics
import threading

import psutil

from bench.load.client import now
from bench.load.plan import CELERY_RSS_MB, GROWTH_MB, GROWTH_PERCENT, WEB_RSS_MB, WINDOW_SECONDS
from ctxadmin.testing.service import ServiceProcess


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
