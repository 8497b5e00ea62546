"""One ``httpx.AsyncClient`` per event loop: an httpx client (its connections, their locks)
belongs to the loop it first ran on, while an :class:`~ctxadmin_client.AsyncClient` and the
adapters holding it are used from any loop and any thread (``asyncio.run`` per call, ADK's
``Runner.run`` and the Agents SDK's ``Runner.run_sync``, worker threads).

Each loop gets its own httpx client on its first request. It is closed on its loop when the
loop shuts its async generators down (``asyncio.run`` and ``asyncio.Runner`` do as they end,
the Agents SDK's ``run_sync`` after each run), or when the owner closes; the loops are held
weakly, and the clients of loops closed without that shutdown are dropped at the next new
loop or at the owner's close.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass

import httpx

CLOSED_MESSAGE = "Cannot send a request, as the client has been closed."

# Closings scheduled on other loops: a task is kept until it ends.
_closing: set[asyncio.Task[None]] = set()


@dataclass
class _Held:
    http: httpx.AsyncClient
    # Suspended in a ``try`` whose ``finally`` closes ``http``: the loop's shutdown of its
    # async generators runs it there.
    guard: AsyncGenerator[None, None]


class PerLoop:
    """The httpx clients of one owner, by event loop (thread-safe)."""

    def __init__(self, make: Callable[[], httpx.AsyncClient]) -> None:
        self._make = make
        self._lock = threading.Lock()
        self._held: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Held] = (
            weakref.WeakKeyDictionary()
        )
        self._closed = False

    async def get(self) -> httpx.AsyncClient:
        """The running loop's client, made on its first use there."""
        loop = asyncio.get_running_loop()
        with self._lock:
            if self._closed:
                raise RuntimeError(CLOSED_MESSAGE)
            held = self._held.get(loop)
            if held is not None:
                return held.http
            self._take(lambda other: other.is_closed())  # nothing can close those now
            http = self._make()
            held = _Held(http, self._guard(loop, http))
            self._held[loop] = held
        await held.guard.asend(None)  # registers the guard with the loop
        return held.http

    async def _guard(
        self, loop: asyncio.AbstractEventLoop, http: httpx.AsyncClient
    ) -> AsyncGenerator[None, None]:
        try:
            yield
        finally:
            with self._lock:
                held = self._held.get(loop)
                if held is not None and held.http is http:
                    del self._held[loop]
            await http.aclose()

    def _take(
        self, which: Callable[[asyncio.AbstractEventLoop], bool]
    ) -> list[tuple[asyncio.AbstractEventLoop, _Held]]:
        """Forget (and answer) the clients of the loops ``which`` picks; under the lock."""
        taken = [(loop, held) for loop, held in self._held.items() if which(loop)]
        for loop, _held in taken:
            del self._held[loop]
        return taken

    def close(self) -> None:
        """Forget every loop's client: each is closed on its own loop (soon, when that loop
        runs; a closed loop's is dropped). Later requests raise ``RuntimeError``."""
        with self._lock:
            self._closed = True
            taken = self._take(lambda loop: True)
        _close_on_their_loops(taken)

    async def aclose(self) -> None:
        """As :meth:`close`, the running loop's client closed before this returns."""
        current = asyncio.get_running_loop()
        with self._lock:
            self._closed = True
            taken = self._take(lambda loop: True)
        _close_on_their_loops([(loop, held) for loop, held in taken if loop is not current])
        for loop, held in taken:
            if loop is current:
                await held.guard.aclose()


def _close_on_their_loops(taken: list[tuple[asyncio.AbstractEventLoop, _Held]]) -> None:
    for loop, held in taken:
        if loop.is_closed():
            continue
        try:
            loop.call_soon_threadsafe(_close_here, loop, held)
        except RuntimeError:
            pass  # closed meanwhile


def _close_here(loop: asyncio.AbstractEventLoop, held: _Held) -> None:
    task = loop.create_task(_finish(held))
    _closing.add(task)
    task.add_done_callback(_closing.discard)


async def _finish(held: _Held) -> None:
    await held.guard.aclose()
