"""gunicorn's own log lines in the project's format (``CTXADMIN_LOG_FORMAT``): its start-up
and worker lines through ``ctxadmin.telemetry.JsonFormatter`` like every other line, and one
access line per request with the method, path (never the query string), status, bytes and
duration as fields."""

from __future__ import annotations

import logging
import os
import traceback

from gunicorn import glogging

from ctxadmin.telemetry import JsonFormatter

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"


def project_formatter() -> logging.Formatter:
    """The formatter ``config.settings`` gives every handler (read before Django starts:
    gunicorn's master logs before it loads the application)."""
    if os.environ.get("CTXADMIN_LOG_FORMAT", "json").strip() == "text":
        return logging.Formatter(TEXT_FORMAT)
    return JsonFormatter()


class ProjectLogger(glogging.Logger):
    def setup(self, cfg):
        super().setup(cfg)
        formatter = project_formatter()
        for log in (self.error_log, self.access_log):
            for handler in log.handlers:
                handler.setFormatter(formatter)

    def access(self, resp, req, environ, request_time):
        if not self.access_log_enabled:
            return
        status = resp.status
        if isinstance(status, str):
            status = status.split(None, 1)[0]
        method = environ.get("REQUEST_METHOD", "-")
        path = environ.get("PATH_INFO", "-")
        fields = {
            "method": method,
            "path": path,
            "status": int(status) if str(status).isdigit() else status,
            "bytes": getattr(resp, "sent", None),
            "duration_ms": round(request_time.total_seconds() * 1000, 1),
            "remote": environ.get("REMOTE_ADDR", "-"),
        }
        try:
            self.access_log.info("%s %s %s", method, path, fields["status"], extra=fields)
        except Exception:
            self.error(traceback.format_exc())
