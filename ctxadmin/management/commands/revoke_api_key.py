from django.core.management.base import BaseCommand, CommandError

from ctxadmin.models import ApiKey
from ctxadmin.services import revoke_api_keys


class Command(BaseCommand):
    help = "Revoke an API key by its prefix (the 10 characters after 'ctx_')."

    def add_arguments(self, parser):
        parser.add_argument("prefix")

    def handle(self, *args, prefix, **options):
        keys = ApiKey.objects.filter(prefix=prefix)
        if not keys.exists():
            raise CommandError(f"no API key with prefix {prefix!r}")
        changed = revoke_api_keys(keys)
        self.stdout.write(f"revoked {prefix}" if changed else f"{prefix} was already revoked")
