"""Two transactions in two threads: one holds what it wrote, uncommitted, while the other
starts; the other must wait for it (a lock), and sees what it wrote once it commits."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from django.db import connections, transaction


def waits_for_the_holder(hold: Callable[[], Any], then: Callable[[], Any]) -> tuple[Any, Any]:
    """Run ``hold`` in a transaction left open, start ``then`` beside it, check that ``then``
    is still waiting half a second later, commit ``hold``; answer both results."""
    held, release = threading.Event(), threading.Event()
    results: dict[str, Any] = {}

    def holder():
        try:
            with transaction.atomic():
                results["held"] = hold()
                held.set()
                assert release.wait(10)
        finally:
            connections.close_all()

    def waiter():
        try:
            results["then"] = then()
        finally:
            connections.close_all()

    holding = threading.Thread(target=holder)
    holding.start()
    assert held.wait(10), "the holding transaction did not get as far as its write"
    waiting = threading.Thread(target=waiter)
    waiting.start()
    time.sleep(0.5)
    still_waiting = waiting.is_alive()
    release.set()
    holding.join(10)
    waiting.join(10)
    assert still_waiting, "the second transaction did not wait for the one in flight"
    return results.get("held"), results.get("then")
