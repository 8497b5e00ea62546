"""The blocking client."""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from types import TracebackType
from typing import Any

import httpx

from . import _config
from ._calls import JSON, Call
from ._transport import Attempt, Operations, low_level_call, next_page, page_items, request_args


class Client(Operations[JSON, Iterator[JSON], None, bytes]):
    """The ctxadmin REST API over a blocking ``httpx.Client``.

    ``base_url`` and ``api_key`` default to ``CTXADMIN_URL`` and ``CTXADMIN_API_KEY``.
    Idempotent requests are retried up to ``max_retries`` times on connection errors,
    timeouts, 429, 502, 503 and 504, after an exponential ``backoff`` with jitter or the
    server's ``Retry-After``. ``transport`` is an ``httpx.BaseTransport`` (e.g. for a proxy
    or a test server).
    """

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float | httpx.Timeout | None = 30.0,
        max_retries: int = 3,
        backoff: float = 0.5,
        transport: httpx.BaseTransport | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self._settings = _config.resolve(
            base_url,
            api_key,
            timeout=timeout,
            max_retries=max_retries,
            backoff=backoff,
            headers=dict(headers or {}),
        )
        self._http = httpx.Client(
            base_url=self._settings.base_url,
            headers=self._settings.headers,
            timeout=self._settings.timeout,
            transport=transport,
        )

    @property
    def base_url(self) -> str:
        return self._settings.base_url

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def request(
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
        return self._send(call)

    def _send(self, call: Call) -> httpx.Response:
        request = self._http.build_request(**request_args(call))
        attempt = Attempt(self._settings.retry, call)
        while True:
            try:
                response = self._http.send(request)
            except httpx.HTTPError as exc:
                wait = attempt.after_failure(exc)
            else:
                if response.status_code < 400:
                    return response
                wait = attempt.after_answer(response)
            time.sleep(wait)

    def _one(self, call: Call) -> JSON:
        return call.read(self._send(call))  # type: ignore[no-any-return]

    def _none(self, call: Call) -> None:
        self._send(call)

    def _raw(self, call: Call) -> bytes:
        return self._send(call).content

    def _many(self, call: Call) -> Iterator[JSON]:
        next_call: Call | None = call
        while next_call is not None:
            page = self._send(next_call).json()
            yield from page_items(page)
            next_call = next_page(self._http.base_url, page)
