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
accesslog = "-"
# Paths and status only: query strings may carry ids users consider private.
access_log_format = '%(h)s "%(m)s %(U)s" %(s)s %(B)s %(M)sms'


def child_exit(server, worker):
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(worker.pid)
