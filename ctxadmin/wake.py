"""Publish a task by its name once the current transaction commits.

Services write the row that is the work and then wake a worker; they name the task rather
than import the module that defines it, so no service depends on a ``tasks`` module (which
depends on the services). The registered task is looked up on the current Celery app, so
its argument checks (identifiers only) and its eager mode in tests apply unchanged.
"""

from __future__ import annotations

from celery import current_app


def wake(task_name: str, *args) -> None:
    """``delay_on_commit`` of the task registered as ``task_name``: its arguments are checked
    now, and it is published after the commit (a broker down at that moment is logged; the
    periodic sweeper re-drives the committed row)."""
    tasks = current_app.tasks
    if task_name not in tasks:
        # A web process has not imported the apps' task modules yet (a worker imports them
        # at start): import them once, as the worker does.
        current_app.loader.import_default_modules()
    tasks[task_name].delay_on_commit(*args)
