"""The embedders' former module, kept only while ``memory.services``, ``memory.outbox``,
``memory.scope_index``, ``memory.admin`` and the ``reembed`` command still import it: the
embedders live in ``memory.embedders`` (this module re-exports its names; delete it once
those importers name ``memory.embedders``)."""

from __future__ import annotations

from memory.embedders import *  # noqa: F403
from memory.embedders import __all__  # noqa: F401
