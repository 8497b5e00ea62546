"""HTTP pieces every provider adapter shares (models, embeddings): one kept-alive client per
process, endpoint joining, bounded body reads, and the typed content-free error base."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from urllib.parse import urlsplit, urlunsplit

import httpx

_clients: dict[int, httpx.Client] = {}
_clients_lock = threading.Lock()


class CodedError(Exception):
    """A call that did not produce a usable reply.

    ``code`` (one of the subclass's ``codes``) is what callers branch on (retry, back off,
    give up). The message is built here from the code, the status and an optional
    ``detail`` that callers fill with sizes or field names only, never with text from
    either side.
    """

    codes: frozenset[str] = frozenset()

    def __init__(
        self,
        code: str,
        *,
        status: int | None = None,
        retry_after_s: float | None = None,
        detail: str | None = None,
    ):
        if code not in self.codes:
            raise ValueError(f"unknown {type(self).__name__} code {code!r}")
        self.code = code
        self.status = status
        self.retry_after_s = retry_after_s
        parts = [code]
        if status is not None:
            parts.append(f"status={status}")
        if retry_after_s is not None:
            parts.append(f"retry_after_s={retry_after_s:g}")
        if detail:
            parts.append(detail)
        super().__init__(" ".join(parts))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self})"


def shared_client() -> httpx.Client:
    """This process's client, made on first use.

    One client keeps connections to a provider alive between calls (a TLS handshake can cost
    more than a short reply); keyed by process id so a forked worker never writes to sockets
    it inherited from its parent.
    """
    pid = os.getpid()
    client = _clients.get(pid)
    if client is None:
        with _clients_lock:
            client = _clients.get(pid)
            if client is None:
                client = _clients[pid] = httpx.Client(follow_redirects=False)
    return client


def endpoint(base_url: str, version: str, path: str) -> str:
    """``base_url`` + ``version`` + ``path``, keeping any query; a base ending in the version
    (``https://host/v1``) does not get it twice."""
    parts = urlsplit(base_url)
    base_path = parts.path.rstrip("/")
    if not base_path.endswith(version):
        base_path += version
    return urlunsplit((parts.scheme, parts.netloc, base_path + path, parts.query, ""))


def read_capped(
    response: httpx.Response,
    cap: int,
    deadline: float,
    *,
    too_large: Callable[[str], Exception],
    timed_out: Callable[[], Exception],
) -> bytes:
    """The (decompressed) body, refused as soon as it passes ``cap`` bytes (``too_large``
    gets a content-free detail) or the deadline (``timed_out``)."""
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > cap:
        raise too_large(f"response_bytes={declared} limit={cap}")
    chunks: list[bytes] = []
    total = 0
    for chunk in response.iter_bytes():
        total += len(chunk)
        if total > cap:
            raise too_large(f"response_bytes>{cap}")
        # Each read is bounded by the timeout computed at the start; this bounds the sum.
        if time.monotonic() > deadline:
            raise timed_out()
        chunks.append(chunk)
    return b"".join(chunks)


def elapsed_ms(started: float) -> int:
    """Milliseconds since ``started`` (a ``time.monotonic()`` reading), for call logs."""
    return round((time.monotonic() - started) * 1000)
