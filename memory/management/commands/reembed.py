"""Re-embed memories after the embedder changed: entries embedded by another model (or,
with ``--all``, every entry) lose their vector and are embedded again in batches, and
entries the embedder refused before are tried again.

The same statement stores their lexical vector again (``search || ''``, equal to it, so the
statistics triggers do not fire): rows written before migration 0006 had it moved out of
line, and a row written again keeps it inline."""

from __future__ import annotations

from django.core.management.base import BaseCommand
from django.db import connection

from memory import embedders, vectors
from memory.tasks import embed_pending


class Command(BaseCommand):
    help = "Re-embed memories whose embedding model is not the configured embedder's."

    def add_arguments(self, parser):
        parser.add_argument("--all", action="store_true", help="re-embed every memory")
        parser.add_argument(
            "--queue",
            action="store_true",
            help="only clear the vectors; the worker's embed task fills them",
        )

    def handle(self, *args, **options):
        embedder = embedders.embedder_from_settings()
        with connection.cursor() as cursor:
            if options["all"]:
                cursor.execute(
                    "UPDATE memory_memoryentry SET embedding = NULL, embedding_model = '', "
                    "embed_failures = 0, "
                    "search = search || ''::tsvector "
                    "WHERE embedding IS NOT NULL"
                )
            else:
                cursor.execute(
                    "UPDATE memory_memoryentry SET embedding = NULL, embedding_model = '', "
                    "embed_failures = 0, "
                    "search = search || ''::tsvector "
                    "WHERE embedding IS NOT NULL AND embedding_model <> %s",
                    [embedder.name],
                )
            cleared = cursor.rowcount
            # Entries the embedder refused get another chance too.
            cursor.execute(
                "UPDATE memory_memoryentry SET embed_failures = 0 "
                "WHERE embedding IS NULL AND embed_failures > 0"
            )
        self.stdout.write(f"cleared {cleared} vectors (embedder {embedder.name})")
        if options["queue"]:
            embed_pending.delay()
            self.stdout.write("queued the embed task")
            return
        total = 0
        while True:
            done = vectors.embed_pending_batch()
            if not done:
                break
            total += done
        self.stdout.write(f"embedded {total} memories")
