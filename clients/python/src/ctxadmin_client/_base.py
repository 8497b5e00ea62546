"""The one definition of every API method, shared by :class:`Client` and
:class:`AsyncClient`.

Each method builds a :class:`~ctxadmin_client._calls.Call` and hands it to one of four
runners that the concrete client implements: ``_one`` (a JSON answer), ``_many`` (every item
across cursor pages), ``_none`` (no body) and ``_raw`` (bytes). The type parameters are what
those runners return: ``dict``, ``Iterator[dict]``, ``None`` and ``bytes`` for the sync
client, their awaitable and async-iterator forms for the async one.
"""

from __future__ import annotations

from typing import Generic, TypeVar

from ._calls import Call

D = TypeVar("D")  # a JSON object answer
L = TypeVar("L")  # the items of a cursor list
N = TypeVar("N")  # an answer without a body
B = TypeVar("B")  # raw bytes


class Runners(Generic[D, L, N, B]):
    def _one(self, call: Call) -> D:
        raise NotImplementedError

    def _many(self, call: Call) -> L:
        raise NotImplementedError

    def _none(self, call: Call) -> N:
        raise NotImplementedError

    def _raw(self, call: Call) -> B:
        raise NotImplementedError
