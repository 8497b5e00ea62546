"""Print the content-free diagnostics of a session's context (or, with ``--lifecycle``, of
its checkpoint and prefix-cache scopes) as JSON: what ``GET /dev/v1/context/...`` answers."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from console.diagnostics import services
from console.diagnostics.cli import app_named, dumps, run


class Command(BaseCommand):
    help = "Content-free context (or --lifecycle) diagnostics of one session, as JSON."

    def add_arguments(self, parser):
        parser.add_argument("app")
        parser.add_argument("user")
        parser.add_argument("session")
        parser.add_argument(
            "--lifecycle",
            action="store_true",
            help="the active checkpoint and the prefix-cache scopes instead of the context",
        )
        parser.add_argument("--model", help="with --lifecycle: the model of the cache scopes")
        parser.add_argument("--max-bytes", type=int, help="the history's byte cap")
        parser.add_argument("--max-tokens", type=int, help="the history's token cap")
        parser.add_argument("--max-input-events", type=int, help="the newest events considered")
        parser.add_argument("--bytes-per-token", type=int, help="the token estimate's divisor")

    def handle(self, *args, app, user, session, lifecycle, model, **options):
        run(lambda: services.check_identifiers(app=app, user=user, sid=session))
        sizing = {
            name: options[name] for name in services.CONTEXT_PARAMS if options.get(name) is not None
        }
        if lifecycle and sizing:
            raise CommandError("--lifecycle takes no context budget options")
        if model is not None and not lifecycle:
            raise CommandError("--model goes with --lifecycle")
        target = app_named(app)
        if lifecycle:
            name = run(lambda: services.parse_model(model)) if model is not None else None
            found = run(lambda: services.session_or_404(target, user, session))
            report = services.lifecycle_report(found, name)
        else:
            policy = run(lambda: services.context_policy(**sizing))
            found = run(lambda: services.session_or_404(target, user, session))
            report = run(lambda: services.context_report(found, policy))
        self.stdout.write(dumps(report))
