"""Artifacts with Google ADK's semantics: save a new version, load the latest or a given one,
list names, list versions, delete a name with all its versions.

Every function takes the scope explicitly — (app, user_id, session_id, name) — and sees only
that scope: a ``user:`` name belongs to the user and is reached from any of the user's session
ids (it needs no session); any other name belongs to the session, which must exist. Inputs are
checked before anything is written, and a save is one transaction: nothing half-applies.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F, Q, QuerySet
from django.db.models.functions import Now

from ctxadmin.erasure import lock_user
from ctxadmin.errors import ServiceError, not_found
from ctxadmin.models import App
from ctxadmin.timestamps import iso_timestamp
from sessions_app.artifacts import rules, storage
from sessions_app.artifacts.models import ArtifactHead, ArtifactVersion
from sessions_app.models import Session

# A save whose name is deleted between taking the head and locking it starts again.
_SAVE_ATTEMPTS = 3


def api_error(error: rules.RuleError) -> ServiceError:
    details = {"field": error.field, **error.details}
    message = error.message if error.code != "validation_error" else str(error)
    return ServiceError(error.code, message, status_code=error.status, details=details)


def _checked_name(name: str) -> str:
    try:
        return rules.check_name(name)
    except rules.RuleError as error:
        raise api_error(error) from None


@dataclass(frozen=True)
class ArtifactInfo:
    """One stored version, without its bytes."""

    name: str
    version: int
    mime_type: str
    size: int
    sha256: str
    created_at: datetime
    custom_metadata: dict | None
    display_name: str | None = None

    @property
    def scope(self) -> str:
        return rules.scope_of(self.name)

    @classmethod
    def of(cls, name: str, row: ArtifactVersion) -> ArtifactInfo:
        return cls(
            name=name,
            version=row.version,
            mime_type=row.mime_type,
            size=row.size,
            sha256=row.sha256,
            created_at=row.created_at,
            custom_metadata=row.custom_metadata,
            display_name=row.display_name,
        )

    def as_json(self) -> dict:
        return {
            "name": self.name,
            "scope": self.scope,
            "version": self.version,
            "mime_type": self.mime_type,
            "size": self.size,
            "sha256": self.sha256,
            "created_at": iso_timestamp(self.created_at),
            "custom_metadata": self.custom_metadata,
            "display_name": self.display_name,
        }


@dataclass(frozen=True)
class LoadedArtifact:
    info: ArtifactInfo
    data: bytes


def _locked_session_pk(app: App, user_id: str, session_id: str) -> int:
    """The session's id, held until the transaction ends against a delete (``FOR KEY SHARE``
    lets appends to the session go on)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT id FROM sessions_app_session "
            "WHERE app_id = %s AND user_id = %s AND session_id = %s FOR KEY SHARE",
            [app.pk, user_id, session_id],
        )
        row = cursor.fetchone()
    if row is None:
        raise not_found()
    return row[0]


def _scope_filter(app: App, user_id: str, session_id: str, name: str) -> Q:
    """The head of ``name`` in its scope."""
    where = Q(app=app, user_id=user_id, name=name)
    if rules.scope_of(name) == rules.USER_SCOPE:
        return where & Q(session__isnull=True)
    return where & Q(
        session__in=Session.objects.filter(app=app, user_id=user_id, session_id=session_id)
    )


def save_artifact(
    app: App,
    user_id: str,
    session_id: str,
    name: str,
    data: bytes,
    mime_type: str,
    custom_metadata: dict | None = None,
    display_name: str | None = None,
) -> ArtifactInfo:
    """Store ``data`` as the name's next version (0 for a new name). Secret-named keys of
    ``custom_metadata`` are dropped. 404 for a session-scoped name of a missing session; 413
    ``artifact_too_large``; 409 ``artifact_version_limit`` when the name holds
    ``CTXADMIN_ARTIFACT_MAX_VERSIONS`` versions."""
    try:
        rules.check_name(name)
        rules.check_mime_type(mime_type)
        rules.check_display_name(display_name)
        rules.check_size(len(data), settings.CTXADMIN_ARTIFACT_MAX_BYTES)
        metadata = rules.clean_metadata(
            custom_metadata, settings.CTXADMIN_ARTIFACT_MAX_METADATA_BYTES
        )
    except rules.RuleError as error:
        raise api_error(error) from None
    data = bytes(data)
    digest = hashlib.sha256(data).hexdigest()
    user_scoped = rules.scope_of(name) == rules.USER_SCOPE
    for _attempt in range(_SAVE_ATTEMPTS):
        with transaction.atomic():
            if user_scoped:  # ordered against the user's erasure, which deletes user: names
                lock_user(app, user_id, shared=True)
            session_pk = None if user_scoped else _locked_session_pk(app, user_id, session_id)
            key = {"app": app, "user_id": user_id, "session_id": session_pk, "name": name}
            ArtifactHead.objects.bulk_create([ArtifactHead(**key)], ignore_conflicts=True)
            head = ArtifactHead.objects.select_for_update().filter(**key).first()
            if head is None:  # deleted since the insert found it
                continue
            limit = settings.CTXADMIN_ARTIFACT_MAX_VERSIONS
            if head.next_version >= limit:
                raise ServiceError(
                    "artifact_version_limit",
                    f"the artifact already has {limit} versions; delete it to start again",
                    status_code=409,
                    details={"limit_versions": limit},
                )
            row = ArtifactVersion(
                head=head,
                version=head.next_version,
                mime_type=mime_type,
                size=len(data),
                sha256=digest,
                custom_metadata=metadata,
                display_name=display_name,
            )
            storage.backend().put(row, data)
            row.save(force_insert=True)
            ArtifactHead.objects.filter(pk=head.pk).update(
                next_version=F("next_version") + 1, updated_at=Now()
            )
            return ArtifactInfo.of(name, row)
    raise ServiceError(
        "artifact_conflict",
        "the artifact was deleted repeatedly while this save ran; retry",
        status_code=409,
    )


def load_artifact(
    app: App, user_id: str, session_id: str, name: str, version: int | None = None
) -> LoadedArtifact:
    """The latest version (or ``version``) with its bytes; 404 when there is none."""
    _checked_name(name)
    rows = ArtifactVersion.objects.filter(
        head__in=ArtifactHead.objects.filter(_scope_filter(app, user_id, session_id, name))
    )
    if version is None:
        row = rows.order_by("-version").first()
    else:
        row = rows.filter(version=version).first()
    if row is None:
        raise not_found()
    return LoadedArtifact(ArtifactInfo.of(name, row), storage.backend(row.storage).get(row))


def list_artifact_names(app: App, user_id: str, session_id: str) -> QuerySet[ArtifactHead]:
    """The session's names and the user's ``user:`` names, by name (the session need not
    exist: then only the user's)."""
    sessions = Session.objects.filter(app=app, user_id=user_id, session_id=session_id)
    return (
        ArtifactHead.objects.filter(app=app, user_id=user_id)
        .filter(Q(session__isnull=True) | Q(session__in=sessions))
        .order_by("name")
    )


def list_artifact_versions(
    app: App, user_id: str, session_id: str, name: str
) -> QuerySet[ArtifactVersion]:
    """The name's versions, oldest first, without their bytes; 404 when the name has none."""
    _checked_name(name)
    head = ArtifactHead.objects.filter(_scope_filter(app, user_id, session_id, name)).first()
    if head is None:
        raise not_found()
    return ArtifactVersion.objects.filter(head=head).defer("data").order_by("version")


def delete_artifact(app: App, user_id: str, session_id: str, name: str) -> int:
    """Delete every version of the name; the number deleted. 404 when there is none."""
    _checked_name(name)
    with transaction.atomic():
        head = (
            ArtifactHead.objects.select_for_update()
            .filter(_scope_filter(app, user_id, session_id, name))
            .only("pk", "next_version")
            .first()
        )
        if head is None:
            raise not_found()
        ArtifactHead.objects.filter(pk=head.pk).delete()  # the versions go with it (database)
    return head.next_version


def erase_user_artifacts(app: App, user_id: str) -> dict[str, int]:
    """The user's ``user:`` names with every version (their erasure, under its lock); a
    session's names go with the session."""
    _deleted, per_model = ArtifactHead.objects.filter(
        app=app, user_id=user_id, session__isnull=True
    ).delete()  # the versions go with their heads (database)
    return {"user_artifacts": per_model.get(ArtifactHead._meta.label, 0)}


def latest_sha256(app: App, user_id: str, session_id: str, name: str) -> str | None:
    """The digest of the name's latest version, or None when it has none."""
    user_scoped = rules.scope_of(name) == rules.USER_SCOPE
    versions = ArtifactVersion.objects.filter(head__app=app, head__user_id=user_id, head__name=name)
    if not user_scoped:
        versions = versions.filter(head__session__session_id=session_id)
    return versions.order_by("-version").values_list("sha256", flat=True).first()
