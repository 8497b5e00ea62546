"""Strict typed configuration parsing: junk fails loudly, naming the variable."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

from ctxadmin.env import Env, parse_database_url, validate_redis_url


def test_booleans():
    env = Env({"A": "yes", "B": "0", "C": "  "})
    assert env.bool("A", False) is True
    assert env.bool("B", True) is False
    assert env.bool("C", True) is True  # blank means unset
    with pytest.raises(ImproperlyConfigured, match="DEBUG"):
        Env({"DEBUG": "maybe"}).bool("DEBUG", False)


def test_integers_with_bounds():
    assert Env({"N": "42"}).int("N", 1, minimum=1, maximum=100) == 42
    assert Env({}).int("N", 7) == 7
    with pytest.raises(ImproperlyConfigured, match="N must be an integer"):
        Env({"N": "4x"}).int("N", 1)
    with pytest.raises(ImproperlyConfigured, match="N must be >= 1"):
        Env({"N": "0"}).int("N", 1, minimum=1)
    with pytest.raises(ImproperlyConfigured, match="N must be <= 10"):
        Env({"N": "11"}).int("N", 1, maximum=10)


def test_lists():
    assert Env({"H": "a.example, b.example"}).list("H", []) == ["a.example", "b.example"]
    with pytest.raises(ImproperlyConfigured, match="empty item"):
        Env({"H": "a,,b"}).list("H", [])


def test_secret_from_file(tmp_path):
    path = tmp_path / "key"
    path.write_text("s3cret\n")
    assert Env({"SECRET_KEY_FILE": str(path)}).secret("SECRET_KEY") == "s3cret"
    with pytest.raises(ImproperlyConfigured, match="not both"):
        Env({"SECRET_KEY": "a", "SECRET_KEY_FILE": str(path)}).secret("SECRET_KEY")
    with pytest.raises(ImproperlyConfigured, match="cannot be read"):
        Env({"SECRET_KEY_FILE": str(tmp_path / "missing")}).secret("SECRET_KEY")
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(ImproperlyConfigured, match="is empty"):
        Env({"SECRET_KEY_FILE": str(tmp_path / "empty")}).secret("SECRET_KEY")


def test_database_url():
    db = parse_database_url("postgres://u%40x:p%2Fw@db.internal:6543/ctx?sslmode=require")
    assert db["USER"] == "u@x"
    assert db["PASSWORD"] == "p/w"
    assert db["HOST"] == "db.internal"
    assert db["PORT"] == "6543"
    assert db["NAME"] == "ctx"
    assert db["OPTIONS"] == {"sslmode": "require"}
    socket = parse_database_url("postgresql://u@%2Fvar%2Frun%2Fpostgresql/ctx")
    assert socket["HOST"] == "/var/run/postgresql"


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("mysql://u@h/db", "schemes"),
        ("postgres://u@h/", "exactly one database"),
        ("postgres://u@h:99999/db", "not a valid URL"),
        ("postgres://u@h/db?pool=1", "unsupported option"),
    ],
)
def test_database_url_junk(url, message):
    with pytest.raises(ImproperlyConfigured, match=message):
        parse_database_url(url)


def test_redis_url():
    assert validate_redis_url("redis://127.0.0.1:6379/3")
    for junk in ("http://h", "redis://:6379", "redis://h/abc", "redis://h:port"):
        with pytest.raises(ImproperlyConfigured):
            validate_redis_url(junk)


def test_settings_module_refuses_junk_at_import(tmp_path):
    """A real process start with a junk limit fails before serving anything."""
    import os
    import subprocess
    import sys

    from ctxadmin import stack

    env = {**os.environ, "CTXADMIN_PAGE_SIZE": "lots"}
    result = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=stack.PROJECT_DIR,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode != 0
    assert "CTXADMIN_PAGE_SIZE must be an integer" in result.stderr
