"""A second process of prefix-cache callers: ``python -m tests.cache_acquirer <app> <threads>``.

It sets Django up (``DATABASE_URL`` names the test database), prints ``ready``, then reads one
JSON line ``{"body": <acquire body>, "start_at": <epoch seconds>}`` from stdin; its threads
each acquire once at ``start_at`` and it prints the outcomes as one JSON line.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    from django.db import connection

    from ctxadmin.models import App
    from tests.cache_helpers import acquire

    app = App.objects.get(name=sys.argv[1])
    threads = int(sys.argv[2])
    connection.close()
    print("ready", flush=True)
    order = json.loads(sys.stdin.readline())
    results: list[dict | None] = [None] * threads

    def run(index: int) -> None:
        while time.time() < order["start_at"]:
            time.sleep(0.001)
        try:
            results[index] = acquire(app, order["body"]).as_json()
        finally:
            connection.close()

    workers = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    print(json.dumps(results), flush=True)


if __name__ == "__main__":
    main()
