"""What the sync and async clients share around the wire: the operations mixed into one
class, building an ``httpx.Request`` from a :class:`Call`, deciding after each try whether
to retry (and how long to wait), and where a cursor's ``next`` page is."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx

from ._base import B, D, L, N
from ._calls import Call
from ._ops_apps import AppOperations
from ._ops_memory import MemoryOperations
from ._ops_runs import RunOperations
from ._ops_sessions import SessionOperations
from ._ops_threads import ThreadOperations
from ._retry import RetryPolicy, is_idempotent
from .errors import CtxAdminError, TransportError, error_from_response

# httpx failures after which the request may not have reached the server or its answer
# was lost: worth another try when the request is idempotent.
_RETRYABLE_TRANSPORT = (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError)


class Operations(
    SessionOperations[D, L, N, B],
    RunOperations[D, L, N, B],
    MemoryOperations[D, L, N, B],
    AppOperations[D, L, N, B],
    ThreadOperations[D, L, N, B],
):
    """Every API method, over the four runners a concrete client implements."""


def request_args(call: Call) -> dict[str, Any]:
    """Keyword arguments of ``httpx.(Async)Client.build_request`` for a call."""
    return {
        "method": call.method,
        "url": call.path,
        "params": dict(call.params) if call.params else None,
        "json": call.json,
        "content": call.content,
        "headers": dict(call.headers) if call.headers else None,
    }


def low_level_call(
    method: str,
    path: str,
    *,
    json: Any = None,
    params: Mapping[str, Any] | None = None,
    content: bytes | None = None,
    headers: Mapping[str, str] | None = None,
    idempotent: bool | None = None,
) -> Call:
    return Call(
        method.upper(),
        path,
        params={k: str(v) for k, v in params.items()} if params else None,
        json=json,
        content=content,
        headers=headers,
        idempotent=idempotent,
    )


class Attempt:
    """The retry state of one request: after each try, either the answer to return, an
    error to raise, or the seconds to wait before the next try."""

    def __init__(self, policy: RetryPolicy, call: Call) -> None:
        self.policy = policy
        self.idempotent = is_idempotent(call.method, call.idempotent)
        self.number = 0

    def after_answer(self, response: httpx.Response) -> float:
        """Seconds to wait before trying again; raises the typed error when not retried."""
        error = error_from_response(response)
        wait = self._wait(response.status_code, error.retry_after)
        if wait is None:
            raise error
        return wait

    def after_failure(self, exc: httpx.HTTPError) -> float:
        """Seconds to wait before trying again; raises :class:`TransportError` when not."""
        wait = self._wait(None, None) if isinstance(exc, _RETRYABLE_TRANSPORT) else None
        if wait is None:
            raise TransportError(f"{type(exc).__name__}: {exc}") from exc
        return wait

    def _wait(self, status: int | None, retry_after: float | None) -> float | None:
        if not self.idempotent:
            return None
        wait = self.policy.delay(self.number, status=status, retry_after=retry_after)
        self.number += 1
        return wait


def next_page(base_url: httpx.URL, page: Any) -> Call | None:
    """The call for the page after ``page``: its ``next`` URL's path and query on the
    client's own origin (the key is never sent to another host)."""
    if not isinstance(page, dict) or not page.get("next"):
        return None
    target = httpx.URL(str(page["next"]))
    url = base_url.copy_with(raw_path=target.raw_path)
    return Call("GET", str(url))


def page_items(page: Any) -> list[dict[str, Any]]:
    if not isinstance(page, dict) or not isinstance(page.get("results"), list):
        raise CtxAdminError(
            "the answer is not a page of results", status=200, code="unexpected_answer"
        )
    items: list[dict[str, Any]] = page["results"]
    return items
