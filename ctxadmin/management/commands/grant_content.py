from django.core.management.base import BaseCommand, CommandError

from ctxadmin.errors import ServiceError
from ctxadmin.operators import CONTENT_GROUP, set_content_access


class Command(BaseCommand):
    help = (
        "Let a console operator see conversation content (the content viewer group: content on "
        "detail pages only, each view audit-logged), or with --revoke take it away."
    )

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--revoke", action="store_true", help="take content access away")

    def handle(self, *args, username, revoke, **options):
        try:
            user = set_content_access(username, granted=not revoke)
        except ServiceError as exc:
            raise CommandError(exc.message) from None
        state = "may see" if user.has_perm("ctxadmin.view_content") else "may not see"
        self.stdout.write(f"{username} {state} conversation content ({CONTENT_GROUP} group)")
