from django.core.management.base import BaseCommand, CommandError

from ctxadmin.errors import ServiceError
from ctxadmin.operators import OPERATOR_GROUPS, create_operator


class Command(BaseCommand):
    help = (
        "Create a console operator: a staff account (never a superuser) in the operator groups "
        "named, with a generated password printed once."
    )

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument(
            "--group", action="append", required=True, choices=OPERATOR_GROUPS, dest="groups"
        )
        parser.add_argument(
            "--manage-keys", action="store_true", help="may also create apps and API keys"
        )

    def handle(self, *args, username, groups, manage_keys, **options):
        try:
            _user, password = create_operator(username, groups, manage_keys=manage_keys)
        except ServiceError as exc:
            raise CommandError(exc.message) from None
        self.stdout.write(f"created operator {username} in {', '.join(sorted(groups))}")
        self.stdout.write(f"password: {password}")
