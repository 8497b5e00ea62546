"""What the diagnostics management commands share: JSON output, app lookup, and errors
reported as the API reports them (code and message, no content)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from django.core.management.base import CommandError

from ctxadmin.errors import ServiceError
from ctxadmin.models import App

#: ``erased_by`` and the log's actor for work done from the command line.
CLI_ACTOR = "cli"


def dumps(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True)


def app_named(name: str) -> App:
    app = App.objects.filter(name=name).first()
    if app is None:
        raise CommandError(f"not_found: no app named {name!r}")
    return app


def run(call: Callable[[], Any]) -> Any:
    """``call()``, with an API error turned into a failing command (exit status 1)."""
    try:
        return call()
    except ServiceError as exc:
        raise CommandError(f"{exc.code}: {exc.message}") from None
