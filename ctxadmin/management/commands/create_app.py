from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from ctxadmin.services import create_app


class Command(BaseCommand):
    help = "Create an app (tenant). Its name is a slug used in every API URL."

    def add_arguments(self, parser):
        parser.add_argument("name", help="1-63 lowercase letters, digits and '-'")
        parser.add_argument("--display-name", default="")

    def handle(self, *args, name, display_name, **options):
        try:
            app = create_app(name, display_name)
        except ValidationError as exc:
            raise CommandError(
                "; ".join(f"{k}: {' '.join(v)}" for k, v in exc.message_dict.items())
            ) from None
        self.stdout.write(f"created app {app.name}")
