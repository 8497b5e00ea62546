"""Writes for tenancy: apps and API keys."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import IntegrityError, connection, transaction
from django.db.models.functions import Lower
from django.utils import timezone

from ctxadmin.delegated import end_minted_by
from ctxadmin.errors import not_found
from ctxadmin.keys import generate_key, hash_key
from ctxadmin.models import APP_NAME_TAKEN, SCOPES, ApiKey, App
from ctxadmin.pruning import MAX_ECHOED, echoed


def create_app(name: str, display_name: str = "") -> App:
    """A new app; a name that breaks the rule, or is taken (ignoring case), is a
    ``ValidationError`` on ``name``, also when a concurrent create wins the race."""
    app = App(name=name, display_name=display_name)
    try:
        app.full_clean(validate_unique=False, validate_constraints=False)
        taken = App.objects.alias(folded=Lower("name")).filter(folded=name.lower()).exists()
        if not taken:
            with transaction.atomic():
                app.save()
    except IntegrityError:
        taken = True
    if taken:
        raise ValidationError({"name": APP_NAME_TAKEN})
    return app


def update_app(app: App, **changes) -> App:
    for field, value in changes.items():
        setattr(app, field, value)
    app.full_clean()
    app.save(update_fields=[*changes, "updated_at"])
    return app


def normalise_scopes(scopes: Iterable[str]) -> list[str]:
    chosen = sorted(set(scopes))
    unknown = [scope for scope in chosen if scope not in SCOPES]
    if unknown:
        shown = [echoed(scope) for scope in unknown[:MAX_ECHOED]]
        raise ValidationError({"scopes": f"unknown scope(s) {shown}; choose from {list(SCOPES)}"})
    if not chosen:
        raise ValidationError({"scopes": f"choose at least one of {list(SCOPES)}"})
    return chosen


def create_api_key(
    app: App, scopes: Iterable[str], name: str = "", created_by=None
) -> tuple[ApiKey, str]:
    """Create a key and return it with its secret, which is never retrievable again."""
    chosen = normalise_scopes(scopes)
    for _attempt in range(5):
        prefix, raw = generate_key()
        try:
            with transaction.atomic():
                key = ApiKey.objects.create(
                    app=app,
                    name=name,
                    prefix=prefix,
                    key_hash=hash_key(raw),
                    scopes=chosen,
                    created_by=created_by,
                )
            return key, raw
        except IntegrityError:  # a prefix collision: draw again
            continue
    raise RuntimeError("could not allocate a unique API key prefix")


def rotate_api_key(key: ApiKey) -> tuple[ApiKey, str]:
    """A new key with the old one's app, scopes and name, and the old one revoked, in one
    transaction (a concurrent rotation of the same key finds it revoked: 404). The tokens
    the old key minted end with it (the new key mints its own)."""
    with transaction.atomic():
        revoked = ApiKey.objects.filter(pk=key.pk, revoked_at__isnull=True).update(
            revoked_at=timezone.now()
        )
        if not revoked:
            raise not_found()
        end_minted_by([key.prefix])
        return create_api_key(key.app, key.scopes, name=key.name)


def revoke_api_keys(keys) -> int:
    """Revoke the given keys (a queryset); already revoked ones keep their time. The
    delegated credentials they minted end in the same transaction."""
    chosen = list(keys.filter(revoked_at__isnull=True).values_list("pk", flat=True))
    with transaction.atomic():
        # The key rows alone, locked (the chosen queryset may join), so what a concurrent
        # revocation already ended is not counted twice.
        prefixes = list(
            ApiKey.objects.filter(pk__in=chosen, revoked_at__isnull=True)
            .select_for_update()
            .values_list("prefix", flat=True)
        )
        revoked = ApiKey.objects.filter(prefix__in=prefixes).update(revoked_at=timezone.now())
        end_minted_by(prefixes)
    return revoked


def hold_minting_key(key: ApiKey) -> bool:
    """Hold the key's row against revocation to the end of the transaction (``FOR SHARE``:
    mints do not wait for each other); False when it was revoked meanwhile. A credential
    minted under it is then committed before the revocation ends those the key minted."""
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("hold_minting_key needs a transaction")
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT revoked_at IS NULL FROM ctxadmin_apikey WHERE id = %s FOR SHARE", [key.pk]
        )
        row = cursor.fetchone()
    return bool(row and row[0])


def touch_api_key(key: ApiKey) -> None:
    """Record use at most once per ``CTXADMIN_API_KEY_TOUCH_SECONDS`` per key: a conditional
    UPDATE, so concurrent requests do not pile up writes on the key row."""
    now = timezone.now()
    window = timedelta(seconds=settings.CTXADMIN_API_KEY_TOUCH_SECONDS)
    if key.last_used_at is not None and now - key.last_used_at < window:
        return
    ApiKey.objects.filter(pk=key.pk).exclude(last_used_at__gte=now - window).update(
        last_used_at=now
    )
    key.last_used_at = now
