"""The memory app's system check, in the project's id series.

ctxadmin.E005  the embedder's dimension differs from the memory vector column's
ctxadmin.W006  memories embedded by another model than the configured embedder (migrate and
               ``manage.py run`` show it): vector search skips them until they are re-embedded
"""

from __future__ import annotations

from django.conf import settings
from django.core.checks import Error, Tags, Warning, register
from django.core.exceptions import ImproperlyConfigured
from django.db import DatabaseError

from memory.models import MemoryEntry


@register()
def check_embedding_dimension(app_configs=None, **kwargs):
    """Vectors of another dimension cannot be stored: refuse to start rather than fail
    every write."""
    column = MemoryEntry._meta.get_field("embedding").dimensions
    configured = settings.CTXADMIN_EMBEDDING_DIMENSION
    if configured != column:
        return [
            Error(
                f"CTXADMIN_EMBEDDING_DIMENSION is {configured}, but the memory vector column "
                f"has {column} dimensions.",
                hint="Use an embedder (or its dimensions option) that produces "
                f"{column}-dimensional vectors, or migrate the column and run "
                "`manage.py reembed --all`.",
                id="ctxadmin.E005",
            )
        ]
    return []


@register(Tags.database)
def check_embedding_model(app_configs=None, databases=None, **kwargs):
    """After a change of embedder (or of its default, when the local model gets installed),
    the memories another model embedded are found lexically only until re-embedded."""
    if not databases:
        return []
    from memory.embedders import embedder_from_settings

    try:
        configured = embedder_from_settings().name
        others = (
            MemoryEntry.objects.filter(embedding__isnull=False)
            .exclude(embedding_model=configured)
            .count()
        )
    except (DatabaseError, ImproperlyConfigured):  # no table yet, or no embedder to name
        return []
    if not others:
        return []
    return [
        Warning(
            f"{others} memories were embedded by another model than the configured "
            f"embedder ({configured}): vector search skips them (lexical search finds them).",
            hint="Run `manage.py reembed` (or `reembed --queue` to leave it to the workers).",
            id="ctxadmin.W006",
        )
    ]
