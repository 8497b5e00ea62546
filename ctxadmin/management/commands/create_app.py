from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from ctxadmin.api.paths import APP_NAME_RULE
from ctxadmin.services import create_app


class Command(BaseCommand):
    help = (
        "Create an app (tenant). Its name is used, exactly as given, in every API URL; it is "
        "unique ignoring case."
    )

    def add_arguments(self, parser):
        parser.add_argument("name", help=APP_NAME_RULE)
        parser.add_argument("--display-name", default="")

    def handle(self, *args, name, display_name, **options):
        try:
            app = create_app(name, display_name)
        except ValidationError as exc:
            raise CommandError(
                "; ".join(f"{k}: {' '.join(v)}" for k, v in exc.message_dict.items())
            ) from None
        self.stdout.write(f"created app {app.name}")
