from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.db import transaction

from ctxadmin.models import SCOPES, App
from ctxadmin.operators import CONTENT_FREE_GROUPS, create_operator
from ctxadmin.services import create_api_key, create_app

DEMO_APP = "demo"
OPERATOR = "operator"


class Command(BaseCommand):
    help = (
        "On a database with no apps and no users: create the demo app, an API key with every "
        "scope and an operator account, and print their credentials once (to stdout only)."
    )

    def add_arguments(self, parser):
        parser.add_argument("--base-url", default="http://127.0.0.1:8000")

    def handle(self, *args, base_url, **options):
        User = get_user_model()
        with transaction.atomic():
            if App.objects.exists() or User.objects.exists():
                self.stdout.write("existing apps/operators found: no demo credentials created")
                return
            app = create_app(DEMO_APP, "Demo app")
            _key, raw = create_api_key(app, SCOPES, name="demo key")
            # A staff account in the operator groups but the content viewer's, not a superuser:
            # seeing conversation content is granted deliberately (grant_content).
            _user, password = create_operator(OPERATOR, CONTENT_FREE_GROUPS, manage_keys=True)
        # Printed once, here, and never logged or stored in clear.
        self.stdout.write(
            "\n".join(
                [
                    "",
                    "=" * 72,
                    " First start: demo credentials (shown only this once; keep them)",
                    "=" * 72,
                    f" Operator console : {base_url}/admin/",
                    f"   username       : {OPERATOR}",
                    f"   password       : {password}",
                    f"   groups         : {', '.join(CONTENT_FREE_GROUPS)}",
                    "   content        : not shown; to grant it (each view audit-logged):",
                    f"                    .venv/bin/python manage.py grant_content {OPERATOR}",
                    f" Demo app         : {DEMO_APP}",
                    f" API key          : {raw}",
                    " Try it:",
                    f"   curl -H 'Authorization: Bearer {raw}' {base_url}/api/v1/apps/{DEMO_APP}/",
                    "=" * 72,
                    "",
                ]
            )
        )
