"""Operator accounts of the console: staff users in the operator groups (never superusers,
who would hold ``ctxadmin.view_content`` without anyone having chosen to give it)."""

from __future__ import annotations

import secrets

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.db import transaction

from ctxadmin.errors import ServiceError

# The groups migration ctxadmin 0003 creates (see the README's "The console: who sees what").
OPERATOR_GROUPS = ("diagnostics viewer", "cache operator", "erasure operator", "content viewer")
CONTENT_GROUP = "content viewer"
#: Every operator group but the one that sees conversation content (granted deliberately).
CONTENT_FREE_GROUPS = tuple(group for group in OPERATOR_GROUPS if group != CONTENT_GROUP)
# Apps and API keys in the console: create apps and keys, rename apps, revoke keys.
KEY_PERMISSIONS = (
    "view_app",
    "add_app",
    "change_app",
    "view_apikey",
    "add_apikey",
    "change_apikey",
)


def create_operator(
    username: str,
    groups: tuple[str, ...] | list[str],
    *,
    manage_keys: bool = False,
    password: str | None = None,
):
    """A staff account in ``groups`` (and with the app and key permissions when
    ``manage_keys``); returns (user, password). A generated password is 16 random bytes."""
    unknown = sorted(set(groups) - set(OPERATOR_GROUPS))
    if unknown:
        raise ServiceError(
            "validation_error",
            f"unknown operator group {unknown[0]!r}; the groups: {', '.join(OPERATOR_GROUPS)}",
            details={"field": "groups"},
        )
    User = get_user_model()
    password = password or secrets.token_urlsafe(16)
    with transaction.atomic():
        if User.objects.filter(username=username).exists():
            raise ServiceError(
                "validation_error",
                f"a user named {username!r} exists",
                details={"field": "username"},
            )
        user = User.objects.create_user(username, password=password, is_staff=True)
        user.groups.set(Group.objects.filter(name__in=groups))
        if manage_keys:
            user.user_permissions.set(
                Permission.objects.filter(
                    content_type__app_label="ctxadmin", codename__in=KEY_PERMISSIONS
                )
            )
    return user, password


def set_content_access(username: str, granted: bool):
    """Put an operator into the content viewer group, or take them out of it; returns the
    user. Content stays visible only on detail pages, each view audit-logged."""
    User = get_user_model()
    user = User.objects.filter(username=username, is_staff=True).first()
    if user is None:
        raise ServiceError(
            "not_found",
            f"no operator named {username!r} (see manage.py create_operator)",
            status_code=404,
            details={"field": "username"},
        )
    group = Group.objects.get(name=CONTENT_GROUP)
    if granted:
        user.groups.add(group)
    else:
        user.groups.remove(group)
    return User.objects.get(pk=user.pk)  # permissions are cached per instance
