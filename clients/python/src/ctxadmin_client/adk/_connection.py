"""The ctxadmin connection the ADK services share: a ready ``AsyncClient`` or one made from a
base URL and an API key (owned, and closed, by the service that made it); and the error ADK
expects where ctxadmin refuses the input."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any, ParamSpec, TypeVar

from google.adk.errors.input_validation_error import InputValidationError

from ctxadmin_client import AsyncClient, errors

P = ParamSpec("P")
R = TypeVar("R")


class InvalidInputError(errors.ValidationError, InputValidationError):
    """ctxadmin refused the input (400, 422): ADK's ``InputValidationError``, and the client's
    ``ValidationError`` (with its ``status``, ``code`` and ``details``)."""


def refusing_invalid_input(method: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
    """A service method whose refused input raises :class:`InvalidInputError`."""

    @functools.wraps(method)
    async def checked(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return await method(*args, **kwargs)
        except InvalidInputError:
            raise
        except errors.ValidationError as error:
            raise InvalidInputError(
                error.message,
                status=error.status,
                code=error.code,
                details=error.details,
                request_id=error.request_id,
                retry_after=error.retry_after,
            ) from error

    return checked


class Connection:
    """What each ADK service holds: the client, and the ctxadmin app an ADK app name maps to.

    ``app``: the ctxadmin app every call goes to whatever ``app_name`` ADK passes (one ctxadmin
    app for several ADK apps, or an app of another name). Without it, ADK's ``app_name`` is
    the ctxadmin app's name.
    """

    def __init__(
        self,
        base_url: str | AsyncClient | None = None,
        api_key: str | None = None,
        *,
        client: AsyncClient | None = None,
        app: str | None = None,
        **client_options: Any,
    ) -> None:
        if isinstance(base_url, AsyncClient):
            client, base_url = base_url, None
        if client is not None:
            if base_url is not None or api_key is not None or client_options:
                raise TypeError("pass either a client or base_url/api_key/options, not both")
            self.client, self.owns_client = client, False
        else:
            self.client = AsyncClient(base_url, api_key, **client_options)
            self.owns_client = True
        self.app = app

    def app_for(self, app_name: str) -> str:
        return self.app or app_name

    async def close(self) -> None:
        if self.owns_client:
            await self.client.aclose()


class ConnectedService:
    """The constructor, ``close`` and ``async with`` of the three ADK services."""

    def __init__(
        self,
        base_url: str | AsyncClient | None = None,
        api_key: str | None = None,
        *,
        client: AsyncClient | None = None,
        app: str | None = None,
        **client_options: Any,
    ) -> None:
        self._connection = Connection(base_url, api_key, client=client, app=app, **client_options)

    @property
    def client(self) -> AsyncClient:
        return self._connection.client

    def _app(self, app_name: str) -> str:
        return self._connection.app_for(app_name)

    async def close(self) -> None:
        """Close the client if this service made it (a client passed in stays open)."""
        await self._connection.close()

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()
