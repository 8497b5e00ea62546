"""The clients' configuration: the environment, and what is refused before any request."""

from __future__ import annotations

import asyncio

import pytest
from ctxadmin_client import AsyncClient, Client, ConfigurationError

pytestmark = pytest.mark.e2e


def test_the_environment_gives_the_url_and_the_key(app, monkeypatch):
    monkeypatch.setenv("CTXADMIN_URL", app.base_url)
    monkeypatch.setenv("CTXADMIN_API_KEY", app.key)
    with Client() as client:
        assert client.base_url == app.base_url
        assert client.get_key(app.name)["scopes"]

    async def run() -> dict:
        async with AsyncClient() as client:
            return await client.get_key(app.name)

    assert asyncio.run(run())["scopes"]


def test_arguments_win_over_the_environment(app, monkeypatch):
    monkeypatch.setenv("CTXADMIN_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("CTXADMIN_API_KEY", "ctx_wrong")
    with Client(app.base_url + "/", app.key) as client:
        assert client.base_url == app.base_url
        assert client.get_key(app.name)["app"] == app.name


@pytest.mark.parametrize("make", [Client, AsyncClient])
def test_a_missing_url_or_key_is_a_configuration_error(make, monkeypatch):
    monkeypatch.delenv("CTXADMIN_URL", raising=False)
    monkeypatch.delenv("CTXADMIN_API_KEY", raising=False)
    with pytest.raises(ConfigurationError, match="CTXADMIN_URL"):
        make()
    monkeypatch.setenv("CTXADMIN_URL", "http://127.0.0.1:8000")
    with pytest.raises(ConfigurationError, match="CTXADMIN_API_KEY"):
        make()
    with pytest.raises(ConfigurationError, match="base URL"):
        make("ftp://example.org", "ctx_key")
    with pytest.raises(ConfigurationError, match="max_retries"):
        make("http://127.0.0.1:8000", "ctx_key", max_retries=-1)
