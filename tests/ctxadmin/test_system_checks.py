from __future__ import annotations

import uuid

import psycopg
import pytest
from django.db import connections
from django.test import override_settings

from ctxadmin.checks import check_broker, check_pgvector, check_secret_key
from tests.conftest import database_url_for_current_connection


def ids(messages):
    return [message.id for message in messages]


@override_settings(SECRET_KEY="ctxadmin-insecure-development-key-do-not-deploy", DEBUG=False)
def test_default_secret_key_without_debug_is_an_error():
    assert ids(check_secret_key()) == ["ctxadmin.E002"]


@override_settings(SECRET_KEY="ctxadmin-insecure-development-key-do-not-deploy", DEBUG=True)
def test_default_secret_key_with_debug_is_a_warning():
    assert ids(check_secret_key()) == ["ctxadmin.W002"]


def test_a_real_secret_key_passes():
    assert check_secret_key() == []


@override_settings(CELERY_BROKER_URL="")
def test_no_broker_is_an_error():
    assert ids(check_broker()) == ["ctxadmin.E003"]


def test_configured_broker_passes():
    assert check_broker() == []


@pytest.mark.django_db
def test_pgvector_present_passes():
    assert check_pgvector(databases=["default"]) == []


@pytest.mark.django_db
def test_pgvector_missing_is_reported(django_db_blocker):
    """A real database on the same server without the extension → ctxadmin.E001."""
    url = database_url_for_current_connection()
    name = f"novector_{uuid.uuid4().hex[:8]}"
    admin_url = url.rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    settings_dict = {**connections["default"].settings_dict, "NAME": name}
    settings_dict["OPTIONS"] = {k: v for k, v in settings_dict["OPTIONS"].items() if k != "pool"}
    connections.settings["novector"] = settings_dict
    try:
        with django_db_blocker.unblock():
            messages = check_pgvector(databases=["novector"])
        assert ids(messages) == ["ctxadmin.E001"]
        assert "CREATE EXTENSION vector" in messages[0].hint
    finally:
        connections["novector"].close()
        del connections["novector"]
        del connections.settings["novector"]
        with psycopg.connect(admin_url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE "{name}"')
