from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from ctxadmin.models import SCOPES, App
from ctxadmin.services import create_api_key


class Command(BaseCommand):
    help = "Create an API key for an app and print it once (only its digest is stored)."

    def add_arguments(self, parser):
        parser.add_argument("--app", required=True)
        parser.add_argument(
            "--scopes",
            nargs="+",
            required=True,
            metavar="SCOPE",
            help=f"one or more of: {', '.join(SCOPES)}",
        )
        parser.add_argument("--name", default="", help="a label for operators")

    def handle(self, *args, app, scopes, name, **options):
        try:
            target = App.objects.get(name=app)
        except App.DoesNotExist:
            raise CommandError(f"no app named {app!r}") from None
        try:
            key, raw = create_api_key(target, scopes, name=name)
        except ValidationError as exc:
            raise CommandError(" ".join(exc.messages)) from None
        self.stderr.write(
            f"created key {key.prefix} for app {target.name} with scopes {', '.join(key.scopes)}; "
            "it is shown once, below"
        )
        self.stdout.write(raw)
