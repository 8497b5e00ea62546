"""What keyed facts cost on the request path: memory add p95 (without a key, and with one,
each add superseding a version) and hybrid search p95 in a scope of 100,000 memories, on
this checkout beside the code before facts had keys and clocks (``BASE``, checked out in a
git worktree), in the same run, on the same machine, as a ratio.

Each side is this module run as a probe (``--probe``) with its checkout first on
``PYTHONPATH``: it starts that checkout's whole service in a ``var`` folder of its own (a
Redis database of its own), bulk-loads one scope, and answers timing requests on stdin.
The parent alternates the two sides round by round (searches, then adds), so a machine
whose speed drifts slows both alike; p95 is over every round's samples.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

# The last commit before memories had keys, two clocks and versions.
BASE = "bb9e6a1"
ROWS = 100_000
ROUNDS = 8
SEARCHES_PER_ROUND = 50
ADDS_PER_ROUND = 50
KEYS = 50
TARGET_RATIO = 1.10
USER = "facts-scale"
_REPLY = "@@facts-cost "


def _probe() -> None:  # pragma: no cover - run as a child process
    """One side: the service of the checkout first on ``PYTHONPATH``."""
    import random

    from bench.memory_search.corpus import Words, bulk_load, scope_indexes
    from bench.service import bench_client, bench_service, stop_service
    from ctxadmin import stack

    var = stack.var_dir() / "bench-facts-cost"
    # Room for the adds beyond the loaded scope (the default scope cap is 100,000).
    service = bench_service(
        var,
        {
            "REDIS_URL": os.environ["FACTS_COST_REDIS_URL"],
            "CTXADMIN_MEMORY_MAX_PER_SCOPE": os.environ["FACTS_COST_SCOPE_CAP"],
        },
    )
    try:
        api = bench_client(service, "facts-cost", "memory")
        import psycopg

        with psycopg.connect(service.database_url) as conn:
            app_id = conn.execute(
                "SELECT id FROM ctxadmin_app WHERE name = %s", (api.app,)
            ).fetchone()[0]
        words = Words(20261207)
        rng = random.Random(7)  # noqa: S311 - reproducible keys
        url = f"/api/v1/apps/{api.app}/users/{USER}/memories"
        added = 0

        def timed(method: str, path: str, body: dict) -> float:
            started = time.perf_counter()
            status, answer = api.request(method, path, body)
            elapsed = (time.perf_counter() - started) * 1000
            if status not in (200, 201):
                raise RuntimeError(f"{path}: {status} {str(answer)[:200]}")
            return elapsed

        for line in sys.stdin:
            command = json.loads(line)
            op = command["op"]
            if op == "load":
                load = bulk_load(service.database_url, app_id, [(USER, command["rows"])], words)
                load.update(scope_indexes(service, app_id, {USER}))
                for query in command["queries"][:5]:  # warm-up
                    api.post(f"{url}/search", {"query": query, "mode": "hybrid"})
                reply: object = load
            elif op == "search":
                reply = [
                    timed("POST", f"{url}/search", {"query": query, "mode": "hybrid"})
                    for query in command["queries"]
                ]
            elif op == "add":
                samples = []
                for _ in range(command["count"]):
                    added += 1
                    body = {"content": f"{words.content()} n{added}"}
                    if command["keyed"] == "supersede":
                        body["key"] = f"fact.k{rng.randrange(KEYS)}"
                    elif command["keyed"] == "first":  # a key of its own: no version to close
                        body["key"] = f"fact.first{added}"
                    samples.append(timed("POST", url, body))
                reply = samples
            else:
                break
            print(_REPLY + json.dumps(reply), flush=True)
    finally:
        stop_service(service)


class Side:
    """A probe process on one checkout."""

    def __init__(self, checkout: Path, redis_url: str, rows: int):
        env = {
            **{name: value for name, value in os.environ.items() if name != "CTXADMIN_VAR_DIR"},
            "PYTHONPATH": str(checkout),
            "FACTS_COST_REDIS_URL": redis_url,
            "FACTS_COST_SCOPE_CAP": str(rows + 10_000),
        }
        self.process = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--probe"],
            cwd=checkout,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def ask(self, **command) -> object:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(json.dumps(command) + "\n")
        self.process.stdin.flush()
        for line in self.process.stdout:
            if line.startswith(_REPLY):
                return json.loads(line[len(_REPLY) :])
        raise RuntimeError(f"the probe stopped (exit {self.process.wait()})")

    def close(self) -> None:
        try:
            self.ask(op="stop")
        except (RuntimeError, BrokenPipeError):
            pass
        self.process.wait(timeout=120)


def base_checkout(repo: Path) -> Path:
    """A git worktree of ``BASE`` beside the repository (``<repo>-facts-base-<BASE>``, so
    it finds the benchmark data where the repository does; made once, reused)."""
    target = repo.parent / f"{repo.name}-facts-base-{BASE}"
    if not (target / "manage.py").exists():
        subprocess.run(
            ["git", "-C", str(repo), "worktree", "add", "--detach", "--force", str(target), BASE],
            check=True,
            capture_output=True,
        )
    return target


def _p95(samples: list[float]) -> float:
    from bench.timing import percentiles

    return percentiles(samples)["p95"]


def measure(rows: int = ROWS, rounds: int = ROUNDS) -> dict:
    """Both sides, alternating; p50/p95 of each measure and this checkout's ratio to BASE."""
    from bench.memory_search.corpus import Words

    repo = Path(__file__).resolve().parent.parent
    words = Words(99)
    queries = [words.query() for _ in range(SEARCHES_PER_ROUND)]
    started = time.perf_counter()
    sides = {
        "base": Side(base_checkout(repo), "redis://127.0.0.1:6379/7", rows),
        "facts": Side(repo, "redis://127.0.0.1:6379/8", rows),
    }
    samples: dict[str, dict[str, list[float]]] = {name: {} for name in sides}
    try:
        loads = {
            name: side.ask(op="load", rows=rows, queries=queries) for name, side in sides.items()
        }
        for _round in range(rounds):
            for name, side in sides.items():
                for measure_name, command in (
                    ("search_hybrid", {"op": "search", "queries": queries}),
                    ("add", {"op": "add", "count": ADDS_PER_ROUND, "keyed": None}),
                ):
                    samples[name].setdefault(measure_name, []).extend(side.ask(**command))
                if name == "facts":
                    for measure_name, keyed in (
                        ("add_keyed_first", "first"),
                        ("add_keyed", "supersede"),
                    ):
                        got = side.ask(op="add", count=ADDS_PER_ROUND, keyed=keyed)
                        samples[name].setdefault(measure_name, []).extend(got)
    finally:
        for side in sides.values():
            side.close()
    from bench.timing import percentiles

    figures = {
        name: {measure_name: percentiles(values) for measure_name, values in by_measure.items()}
        for name, by_measure in samples.items()
    }
    base = figures["base"]
    ratios = {
        "search_hybrid": round(
            figures["facts"]["search_hybrid"]["p95"] / base["search_hybrid"]["p95"], 3
        ),
        "add": round(figures["facts"]["add"]["p95"] / base["add"]["p95"], 3),
        "add_keyed_first": round(
            figures["facts"]["add_keyed_first"]["p95"] / base["add"]["p95"], 3
        ),
        "add_keyed": round(figures["facts"]["add_keyed"]["p95"] / base["add"]["p95"], 3),
    }
    return {
        "base": BASE,
        "rows": rows,
        "rounds": rounds,
        "searches": rounds * SEARCHES_PER_ROUND,
        "adds": rounds * ADDS_PER_ROUND,
        "keys": KEYS,
        "loads": loads,
        "figures": figures,
        "ratios_p95": ratios,
        # Today's operations (an add without a key, a hybrid search) against the base; the
        # keyed adds, which the base has no counterpart of, against its add.
        "met": max(ratios["search_hybrid"], ratios["add"]) <= TARGET_RATIO,
        "keyed_met": max(ratios["add_keyed_first"], ratios["add_keyed"]) <= TARGET_RATIO,
        "wall_s": round(time.perf_counter() - started, 1),
    }


if __name__ == "__main__":
    if sys.argv[1:] == ["--probe"]:
        _probe()
    else:
        import argparse

        parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
        parser.add_argument("--rows", type=int, default=ROWS)
        parser.add_argument("--rounds", type=int, default=ROUNDS)
        args = parser.parse_args()
        print(json.dumps(measure(args.rows, args.rounds), indent=2))
