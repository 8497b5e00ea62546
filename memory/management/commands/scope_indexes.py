"""Build and drop large scopes' own vector indexes now (``memory/scope_index.py``), rather
than at the beat's next run: after a bulk import, say. Prints what it did and the indexes
that stand (ids and counts only)."""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError

from memory import scope_index
from memory.models import ScopeIndex


class Command(BaseCommand):
    help = "Build the missing vector indexes of large scopes and drop the unwanted ones."

    def add_arguments(self, parser):
        parser.add_argument(
            "--max-builds",
            type=int,
            default=1000,
            help="build at most this many indexes in this run (default 1000)",
        )
        parser.add_argument(
            "--wait",
            action="store_true",
            help="wait for a maintainer already running (the beat's) instead of failing",
        )

    def handle(self, *args, **options):
        if options["max_builds"] < 0:
            raise CommandError("--max-builds must be 0 or more")
        result = scope_index.maintain(max_builds=options["max_builds"], wait=options["wait"])
        if not result["locked"]:
            raise CommandError("another maintainer of scope indexes is running")
        result["indexes"] = [
            {
                "index": row.index_name,
                "app": row.app_id,
                "state": row.state,
                "entries": row.entries,
                "build_seconds": row.build_seconds,
            }
            for row in ScopeIndex.objects.order_by("pk")
        ]
        self.stdout.write(json.dumps(result, indent=2))
