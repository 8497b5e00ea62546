"""A deployment's identity and the broker names derived from it.

Two deployments may share one Redis (two checkouts on a laptop, a staging copy beside
production): each must see only its own tasks. The identity is the database the deployment
writes to, so everything that shares a database shares a queue, and nothing else does.

Pure: no Django import (settings use it before Django is set up).
"""

from __future__ import annotations

import hashlib
import re

# The header every published task carries; a worker of another deployment refuses the task.
TASK_HEADER = "ctxadmin_deployment"
_VALID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def deployment_id(host: str, port: str | int | None, name: str) -> str:
    """Twelve hex digits naming the database at ``host:port/name`` (never its credentials)."""
    identity = f"{(host or '').lower()}:{port or ''}/{name}"
    return hashlib.sha256(identity.encode("utf-8")).hexdigest()[:12]


def validate_deployment(value: str) -> str:
    if not _VALID.match(value):
        raise ValueError(
            "CTXADMIN_DEPLOYMENT must be 1-64 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )
    return value


def queue_name(deployment: str) -> str:
    return f"ctxadmin.{deployment}"


def broker_key_prefix(queue: str) -> str:
    """Every broker key of a queue's deployment (queues, unacked messages, the control
    channel) starts with this: deployments on other queues never read each other's keys."""
    return f"{queue}:"


def foreign_replies(replies: list[dict] | None, deployment: str) -> list[tuple[str, str]]:
    """(worker, deployment) of each worker that answered on our queue for another deployment
    (``replies`` as Celery's broadcast returns them: one ``{hostname: answer}`` a worker)."""
    found = []
    for reply in replies or []:
        for hostname, answer in reply.items():
            # A worker that does not know the question (another project) is foreign too.
            theirs = answer.get("deployment") if isinstance(answer, dict) else None
            if theirs != deployment:
                found.append((hostname, str(theirs or "unknown")))
    return sorted(found)
