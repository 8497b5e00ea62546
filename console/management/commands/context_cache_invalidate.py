"""Invalidate one exact prefix-cache scope of a session's (app, user, model), confirmed by
the same JSON as ``POST /dev/v1/context/.../cache/invalidate``; a mismatch changes nothing
and exits non-zero."""

from __future__ import annotations

from django.conf import settings
from django.core.management.base import BaseCommand

from console.diagnostics import services
from console.diagnostics.cli import CLI_ACTOR, app_named, dumps, run
from ctxadmin.api.jsonsafe import JsonInputError, loads_strict
from ctxadmin.errors import ServiceError


def _confirmation(raw: str, model: str) -> services.Confirmation:
    try:
        body = loads_strict(raw.encode("utf-8"), settings.CTXADMIN_MAX_JSON_DEPTH)
    except (JsonInputError, UnicodeEncodeError):
        raise ServiceError(
            "malformed_json", "--confirm-json is not a valid JSON document"
        ) from None
    confirmation = services.parse_confirmation(body)
    if confirmation.model.removeprefix("models/") != model:
        raise ServiceError(
            "confirmation_mismatch",
            "The confirmation's model does not match --model; nothing was invalidated.",
            status_code=409,
            details={"field": "model"},
        )
    return confirmation


class Command(BaseCommand):
    help = (
        "Invalidate one exact cache scope of (app, user, model). --confirm-json must be "
        '{"app_name", "user_id", "session_id", "model", "scope_fingerprint"} naming it '
        "(inspect_context --lifecycle --model M prints the fingerprint)."
    )

    def add_arguments(self, parser):
        parser.add_argument("app")
        parser.add_argument("user")
        parser.add_argument("session")
        parser.add_argument("--model", required=True)
        parser.add_argument("--confirm-json", required=True, dest="confirm_json")

    def handle(self, *args, app, user, session, model, confirm_json, **options):
        run(lambda: services.check_identifiers(app=app, user=user, sid=session))
        name = run(lambda: services.parse_model(model))
        confirmation = run(lambda: _confirmation(confirm_json, name))
        target = app_named(app)
        found = run(lambda: services.session_or_404(target, user, session))
        result = run(lambda: services.invalidate_confirmed(found, confirmation, CLI_ACTOR))
        self.stdout.write(dumps(result))
