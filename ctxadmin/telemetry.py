"""Content-free telemetry: structured JSON logs and Prometheus metrics.

Metric labels are bounded (HTTP method, URL route pattern, status class); values are counts
and durations. Under gunicorn, ``PROMETHEUS_MULTIPROC_DIR`` (set by ``manage.py run``) makes
the counters add up across worker processes.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import logging.config
import os
import time
from datetime import UTC, datetime

from django.http import HttpRequest
from prometheus_client import Counter, Histogram

HTTP_REQUESTS = Counter(
    "ctxadmin_http_requests_total",
    "HTTP requests served, by method, route pattern and status code class.",
    ["method", "route", "status"],
)
HTTP_LATENCY = Histogram(
    "ctxadmin_http_request_duration_seconds",
    "Time to produce a response, by route pattern.",
    ["route"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
_METHODS = {"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"}


class RequestMetricsMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        started = time.perf_counter()
        response = self.get_response(request)
        match = getattr(request, "resolver_match", None)
        route = (match.route or match.view_name) if match else "unmatched"
        method = request.method if request.method in _METHODS else "OTHER"
        HTTP_REQUESTS.labels(method, route, f"{response.status_code // 100}xx").inc()
        HTTP_LATENCY.labels(route).observe(time.perf_counter() - started)
        return response


_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime"}


def loggable(value):
    """An extra as a log line writes it. Django puts the request on its own records
    (``django.request``, ``django.security.*``), and its ``str`` carries the query string,
    which may hold a credential: only the method and the path are written."""
    if isinstance(value, HttpRequest):
        return f"{value.method} {value.path}"
    return value


def configure_logging(config: dict) -> None:
    """``LOGGING_CONFIG``: Django's ``dictConfig``, and Python's warnings routed to logging
    (the ``py.warnings`` logger), so that they too are lines in the one format."""
    logging.config.dictConfig(config)
    logging.captureWarnings(True)


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, event, and the record's extras."""

    def format(self, record: logging.LogRecord) -> str:
        payload = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "event": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                payload[key] = loggable(value)
        if record.exc_info:
            payload["exc_type"] = record.exc_info[0].__name__ if record.exc_info[0] else None
            payload["traceback"] = self.formatException(record.exc_info)
        return json.dumps(payload, default=str, ensure_ascii=False)


#: The tasks the beat runs to sweep and re-drive (``config.celery`` names them): their runs
#: are housekeeping, and a run that found nothing to do is not news.
HOUSEKEEPING_TASKS: set[str] = set()


def idle(outcome) -> bool:
    """Whether a housekeeping run's outcome (a count, or a dict of counts and flags) says it
    found nothing to do."""
    if isinstance(outcome, dict):
        return all(isinstance(v, bool) or not v for v in outcome.values())
    return not outcome


def _package_dir(name: str) -> str | None:
    spec = importlib.util.find_spec(name)  # finds it without importing it
    locations = list(spec.submodule_search_locations or []) if spec else []
    return os.path.join(locations[0], "") if locations else None


class SdkLinesContentFree(logging.Filter):
    """Lines the MCP SDK writes keep only their fixed head (and an exception's type): its
    messages quote what they are about, and a request that failed its validation is quoted
    with its parameters. Attached to the console handler, so every logger of the SDK's
    package, and its lines on the root logger, pass it."""

    def __init__(self, name: str = "") -> None:
        super().__init__(name)
        self._sdk_dir = _package_dir("mcp")

    def filter(self, record: logging.LogRecord) -> bool:
        if self._sdk_dir is None or not record.pathname.startswith(self._sdk_dir):
            return True
        head = str(record.msg).split(":", 1)[0].split("%", 1)[0].split("{", 1)[0].strip()
        head = "mcp sdk: " + (head[:80] or "message")
        if record.exc_info and record.exc_info[0] is not None:
            head += f" ({record.exc_info[0].__name__})"
        record.msg, record.args = head, ()
        record.exc_info, record.exc_text, record.stack_info = None, None, None
        return True


class QuietHousekeeping(logging.Filter):
    """Celery's routine lines about housekeeping (the beat sending a sweeper, a worker
    receiving and finishing one) at DEBUG: each sweeper's own outcome line says at INFO when
    it did something. Attached to Celery's ``celery.beat``, ``celery.worker.strategy`` and
    ``celery.app.trace`` loggers."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno != logging.INFO or not self._housekeeping(record):
            return True
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)

    @staticmethod
    def _housekeeping(record: logging.LogRecord) -> bool:
        data = getattr(record, "data", None)
        if isinstance(data, dict):  # a worker's "received" and "succeeded" lines
            return data.get("name") in HOUSEKEEPING_TASKS
        # The beat's "Scheduler: Sending due task <entry> (<task>)".
        args = record.args if isinstance(record.args, tuple) else ()
        return len(args) == 2 and args[1] in HOUSEKEEPING_TASKS
