"""The asyncio client: the same methods as :class:`~ctxadmin_client.Client`, as coroutines
(and async iterators for the lists)."""

from __future__ import annotations

import asyncio
import ssl
import threading
import weakref
from collections.abc import AsyncIterator, Awaitable, Mapping
from types import TracebackType
from typing import Any

import httpx

from . import _config
from ._calls import JSON, Call
from ._loops import PerLoop
from ._transport import Attempt, Operations, low_level_call, next_page, page_items, request_args

#: Requests one ``AsyncClient`` keeps in flight on one event loop, by default.
MAX_IN_FLIGHT = 32


class AsyncClient(
    Operations[Awaitable[JSON], AsyncIterator[JSON], Awaitable[None], Awaitable[bytes]]
):
    """The ctxadmin REST API over ``httpx.AsyncClient`` (see :class:`Client` for the
    arguments; ``transport`` is an ``httpx.AsyncBaseTransport``).

    It works on any event loop and in any thread: each loop gets an httpx client of its own
    on its first request there, closed as that loop ends or by :meth:`aclose` / :meth:`close`
    (see ``_loops``). A ``transport`` given is used as given on every loop.

    At most ``max_in_flight`` requests (default ``MAX_IN_FLIGHT``, 32) are in flight on one
    loop at a time; the others wait their turn in order (a semaphore per loop), so any number
    of concurrent calls reach the server at its pace, each request's ``timeout`` counted
    from its sending (httpx's pool, 100 connections, would queue them all and time them out
    while they wait). A retry waits for its backoff without holding a place.
    """

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float | httpx.Timeout | None = 30.0,
        max_retries: int = 3,
        backoff: float = 0.5,
        transport: httpx.AsyncBaseTransport | None = None,
        headers: Mapping[str, str] | None = None,
        max_in_flight: int = MAX_IN_FLIGHT,
    ) -> None:
        if isinstance(max_in_flight, bool) or not isinstance(max_in_flight, int):
            raise TypeError("max_in_flight must be a positive integer")
        if max_in_flight < 1:
            raise ValueError("max_in_flight must be a positive integer")
        self.max_in_flight = max_in_flight
        self._slots: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
            weakref.WeakKeyDictionary()
        )
        self._slots_lock = threading.Lock()
        self._settings = _config.resolve(
            base_url,
            api_key,
            timeout=timeout,
            max_retries=max_retries,
            backoff=backoff,
            headers=dict(headers or {}),
        )
        self._base = httpx.URL(self._settings.base_url)
        self._transport = transport
        self._ssl: ssl.SSLContext | None = None
        self._https = PerLoop(self._new_http)

    def _new_http(self) -> httpx.AsyncClient:
        if self._transport is None and self._ssl is None:
            # Made once: loading the CA bundle costs about 20 ms, a new loop's client 0.1 ms.
            self._ssl = httpx.create_ssl_context()
        return httpx.AsyncClient(
            base_url=self._settings.base_url,
            headers=self._settings.headers,
            timeout=self._settings.timeout,
            transport=self._transport,
            verify=self._ssl or True,
        )

    @property
    def base_url(self) -> str:
        return self._settings.base_url

    async def aclose(self) -> None:
        """Close the httpx clients: this loop's now, each other loop's on its loop."""
        await self._https.aclose()

    def close(self) -> None:
        """Close the httpx clients from synchronous code: each on its own loop (soon, when
        that loop runs), so nothing waits and no coroutine is left unawaited."""
        self._https.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: Mapping[str, Any] | None = None,
        content: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        idempotent: bool | None = None,
    ) -> httpx.Response:
        """Send one request (with the client's retries); an error answer raises its typed
        :class:`~ctxadmin_client.errors.CtxAdminError`."""
        call = low_level_call(
            method,
            path,
            json=json,
            params=params,
            content=content,
            headers=headers,
            idempotent=idempotent,
        )
        return await self._send(call)

    def _in_flight(self) -> asyncio.Semaphore:
        """The running loop's places for requests in flight."""
        loop = asyncio.get_running_loop()
        with self._slots_lock:
            slots = self._slots.get(loop)
            if slots is None:
                slots = self._slots[loop] = asyncio.Semaphore(self.max_in_flight)
            return slots

    async def _send(self, call: Call) -> httpx.Response:
        http = await self._https.get()
        slots = self._in_flight()
        request = http.build_request(**request_args(call))
        attempt = Attempt(self._settings.retry, call)
        while True:
            async with slots:
                try:
                    response = await http.send(request)
                except httpx.HTTPError as exc:
                    wait = attempt.after_failure(exc)
                else:
                    if response.status_code < 400:
                        return response
                    wait = attempt.after_answer(response)
            await asyncio.sleep(wait)

    async def _one(self, call: Call) -> JSON:
        return call.read(await self._send(call))  # type: ignore[no-any-return]

    async def _none(self, call: Call) -> None:
        await self._send(call)

    async def _raw(self, call: Call) -> bytes:
        return (await self._send(call)).content

    async def _many(self, call: Call) -> AsyncIterator[JSON]:
        next_call: Call | None = call
        while next_call is not None:
            page = (await self._send(next_call)).json()
            for item in page_items(page):
                yield item
            next_call = next_page(self._base, page)
