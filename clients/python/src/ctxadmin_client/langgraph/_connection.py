"""The ctxadmin clients a LangGraph adapter holds: LangGraph calls the sync methods from
``invoke`` and the async ones from ``ainvoke``, so the adapter keeps one of each, made from a
base URL and an API key (owned, and closed, by the adapter), or passed in ready."""

from __future__ import annotations

from typing import Any, Self

from ctxadmin_client import AsyncClient, Client


class Connection:
    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        app: str | None = None,
        client: Client | None = None,
        async_client: AsyncClient | None = None,
        **client_options: Any,
    ) -> None:
        given = client is not None or async_client is not None
        if given and (base_url is not None or api_key is not None or client_options):
            raise TypeError("pass either clients or base_url/api_key/options, not both")
        self._base_url, self._api_key, self._options = base_url, api_key, client_options
        self._client, self._async_client = client, async_client
        self._owns_client = self._owns_async = not given
        if app is None:
            if self._client is None and not self._owns_client:
                raise TypeError("app: name the ctxadmin app when giving an AsyncClient only")
            app = self.client.whoami()["app"]  # the key's own app, asked once
        if not app:
            raise TypeError("app: the ctxadmin app to keep LangGraph's data in")
        self.app = app

    @property
    def client(self) -> Client:
        if self._client is None:
            if not self._owns_client:
                raise TypeError("this adapter was given an AsyncClient only: use its a* methods")
            self._client = Client(self._base_url, self._api_key, **self._options)
        return self._client

    @property
    def async_client(self) -> AsyncClient:
        if self._async_client is None:
            if not self._owns_async:
                raise TypeError("this adapter was given a Client only: use its sync methods")
            self._async_client = AsyncClient(self._base_url, self._api_key, **self._options)
        return self._async_client

    def close(self) -> None:
        if self._owns_client and self._client is not None:
            self._client.close()
            self._client = None

    async def aclose(self) -> None:
        self.close()
        if self._owns_async and self._async_client is not None:
            await self._async_client.aclose()
            self._async_client = None


class Holding:
    """Closing an adapter closes the clients it made (``_connection``), with or without
    ``with``/``async with``."""

    _connection: Connection

    def close(self) -> None:
        self._connection.close()

    async def aclose(self) -> None:
        await self._connection.aclose()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
