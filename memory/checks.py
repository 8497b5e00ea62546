"""The memory app's system check, in the project's id series.

ctxadmin.E005  the embedder's dimension differs from the memory vector column's
"""

from __future__ import annotations

from django.conf import settings
from django.core.checks import Error, register

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
