"""gunicorn settings for ``manage.py run`` (and a starting point for deployments)."""

import os

# Threaded workers keep client connections alive between requests (sync workers close them).
worker_class = "gthread"
threads = int(os.environ.get("CTXADMIN_WEB_THREADS", "4"))
timeout = int(os.environ.get("CTXADMIN_WEB_TIMEOUT", "60"))
graceful_timeout = 20
keepalive = 5
max_requests = 5000
max_requests_jitter = 500
# gunicorn's control socket defaults to one path per user account ($HOME/.gunicorn/gunicorn.ctl),
# shared by every instance, and an instance that stops deletes it for the others: an instance
# gets one only where CTXADMIN_GUNICORN_CONTROL_SOCKET names it (manage.py run: var/run/).
control_socket = os.environ.get("CTXADMIN_GUNICORN_CONTROL_SOCKET", "").strip() or None
control_socket_disable = control_socket is None
accesslog = "-"
# Every line (start-up, workers, one per request) in the project's log format, JSON by default;
# a request's line has its method, path, status, bytes and duration, never the query string
# (it may carry ids users consider private).
logger_class = "config.gunicorn_logging.ProjectLogger"


def child_exit(server, worker):
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(worker.pid)
