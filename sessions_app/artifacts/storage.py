"""Where an artifact version's bytes live. A version row names its backend in ``storage``.

``database`` keeps the bytes in the row itself, so a save and a delete are one transaction
with nothing else to clean up. A backend over a Django ``Storage`` would write a file named by
``storage_key`` in ``put`` and read it back in ``get``; it would also need a sweep of files
whose rows are gone, since rows are deleted by cascades in the database.
"""

from __future__ import annotations

from typing import Protocol

from sessions_app.artifacts.models import DATABASE_STORAGE, ArtifactVersion


class ArtifactStorage(Protocol):
    name: str

    def put(self, version: ArtifactVersion, data: bytes) -> None:
        """Keep ``data`` for the unsaved ``version`` (setting its ``storage`` fields)."""

    def get(self, version: ArtifactVersion) -> bytes:
        """The bytes of a saved version (loaded with its ``data`` column)."""


class DatabaseStorage:
    name = DATABASE_STORAGE

    def put(self, version: ArtifactVersion, data: bytes) -> None:
        version.storage = self.name
        version.storage_key = ""
        version.data = data

    def get(self, version: ArtifactVersion) -> bytes:
        return bytes(version.data)


_BACKENDS: dict[str, ArtifactStorage] = {DATABASE_STORAGE: DatabaseStorage()}


def backend(name: str = DATABASE_STORAGE) -> ArtifactStorage:
    return _BACKENDS[name]
