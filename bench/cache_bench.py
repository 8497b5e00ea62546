"""The provider prefix-cache registry: acquire latency for hits, a burst of concurrent misses
joined into one provider create per key, and the registry's own cost on a miss.

``make bench`` runs it against its service; alone, ``python -m bench.cache_bench`` starts a
service of its own (in ``var/bench-cache``) and rewrites the "Prefix cache" section of
``bench/BENCHMARKS.md``. Either way the provider is ``FakeGeminiCache`` (Gemini's
``cachedContents`` wire format on 127.0.0.1, served from this process), which must be
running before the service starts: the service reaches it through
``CTXADMIN_GEMINI_BASE_URL`` and ``CTXADMIN_GEMINI_API_KEY`` (``service_env``).

- Hits: one key is created, then one client acquires it ``HIT_ACQUIRES`` times, then
  ``HIT_CLIENTS`` client processes (each with its own kept-alive connection) acquire it
  ``HIT_ACQUIRES`` times each, all at once. Every answer must be ``hit``.
- Burst: ``BURST_KEYS`` new prefixes, ``BURST_CALLERS`` callers each, every caller a thread
  with its own connection (in ``BURST_PROCESSES`` client processes), released by one barrier
  while the provider takes ``BURST_CREATE_DELAY_S`` per create. The provider must see
  exactly one create per key.
- Misses: ``MISS_KEYS`` new prefixes acquired one after another with no provider delay.
"""

from __future__ import annotations

import json
import multiprocessing
import secrets
import statistics
import sys
import threading
import time
from datetime import UTC, datetime

from bench.client import Api
from bench.machine import machine, postgres_version
from bench.sections import REPORT, splice
from bench.service import bench_client, bench_service, stop_service
from ctxadmin import stack
from ctxadmin.testing.fake_gemini_cache import FakeGeminiCache

MODEL = "gemini-2.5-flash"
PREFIX_BYTES = 40_000
TTL_MS = 600_000
HIT_TIMEOUT_MS = 30_000
BURST_TIMEOUT_MS = 60_000
HIT_CLIENTS = 4
HIT_ACQUIRES = 500
HIT_WARMUP = 10
BURST_KEYS = 10
BURST_CALLERS = 20
BURST_PROCESSES = 4
BURST_CREATE_DELAY_S = 0.2
MISS_KEYS = 30
BARRIER_TIMEOUT_S = 120


def start_provider() -> FakeGeminiCache:
    """The fake Gemini server the service is to use (start it before the service)."""
    return FakeGeminiCache().start()


def service_env(fake: FakeGeminiCache) -> dict[str, str]:
    """The settings that point a service's ``gemini`` cache provider at ``fake``."""
    return {"CTXADMIN_GEMINI_BASE_URL": fake.base_url, "CTXADMIN_GEMINI_API_KEY": fake.api_key}


def _prefix(label: str) -> dict:
    """A system instruction and two turns, about ``PREFIX_BYTES`` of text, unique to ``label``."""
    clauses, size, n = [], 0, 0
    while size < PREFIX_BYTES:
        clause = (
            f"{label} clause {n}: the agent keeps the tool manual, the style guide and the "
            f"customer's account history in view, and answers in the customer's language."
        )
        clauses.append(clause)
        size += len(clause) + 1
        n += 1
    return {
        "system_instruction": f"You are the support agent of {label}.",
        "contents": [
            {"role": "user", "parts": [{"text": " ".join(clauses)}]},
            {"role": "model", "parts": [{"text": "Understood."}]},
        ],
    }


def _body(label: str, timeout_ms: int) -> dict:
    return {
        "scope": {
            "provider": "gemini",
            "user_id": "bench-user",
            "model": MODEL,
            "policy": {"min_prefix_tokens": 0},
        },
        "prefix": _prefix(label),
        "ttl_ms": TTL_MS,
        "timeout_ms": timeout_ms,
    }


def _path(app: str) -> str:
    return f"/api/v1/apps/{app}/cache/acquire"


def _acquire(api, body: dict) -> tuple[float, dict]:
    """(milliseconds, answer) of one acquire; anything but a 200 raises."""
    started = time.perf_counter()
    status, answer = api.request("POST", _path(api.app), body)
    elapsed = (time.perf_counter() - started) * 1000
    if status != 200:
        raise RuntimeError(f"acquire answered {status}: {str(answer)[:300]}")
    return elapsed, answer


def _outcome(answer: dict) -> str:
    return answer["status"] if answer["status"] != "bypass" else f"bypass:{answer['reason']}"


def _latency(samples: list[float]) -> dict[str, float]:
    cuts = statistics.quantiles(samples, n=100, method="inclusive")
    return {
        "p50": round(cuts[49], 2),
        "p95": round(cuts[94], 2),
        "max": round(max(samples), 2),
    }


# --------------------------------------------------------------------------- hits


def _hit_client(base_url: str, key: str, app: str, body: dict, barrier, results) -> None:
    """One of the concurrent hit clients, in its own process."""
    try:
        api = Api(base_url, key, app)
        api.connection.connect()
        barrier.wait(BARRIER_TIMEOUT_S)
        samples, outcomes = [], {}
        for _ in range(HIT_ACQUIRES):
            elapsed, answer = _acquire(api, body)
            samples.append(elapsed)
            outcome = _outcome(answer)
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
        results.put({"samples": samples, "outcomes": outcomes, "ended": time.perf_counter()})
    except Exception as exc:  # reported by the parent
        barrier.abort()
        results.put({"error": f"{type(exc).__name__}: {exc}"})


def hits(api, label: str) -> dict:
    body = _body(f"{label}-hit", HIT_TIMEOUT_MS)
    _elapsed, first = _acquire(api, body)
    if first["status"] != "created":
        raise RuntimeError(f"warming the hit key answered {first}")
    for _ in range(HIT_WARMUP):
        _acquire(api, body)

    single, single_outcomes = [], {}
    started = time.perf_counter()
    for _ in range(HIT_ACQUIRES):
        elapsed, answer = _acquire(api, body)
        single.append(elapsed)
        outcome = _outcome(answer)
        single_outcomes[outcome] = single_outcomes.get(outcome, 0) + 1
    single_seconds = time.perf_counter() - started

    context = multiprocessing.get_context("fork")
    barrier, results = context.Barrier(HIT_CLIENTS + 1), context.Queue()
    clients = [
        context.Process(
            target=_hit_client,
            args=(f"http://{api.host}:{api.port}", api.key, api.app, body, barrier, results),
        )
        for _ in range(HIT_CLIENTS)
    ]
    for client in clients:
        client.start()
    try:
        barrier.wait(BARRIER_TIMEOUT_S)
        started = time.perf_counter()
    except threading.BrokenBarrierError:
        started = time.perf_counter()
    answers = [results.get(timeout=600) for _ in clients]
    for client in clients:
        client.join()
    errors = [a["error"] for a in answers if "error" in a]
    if errors:
        raise RuntimeError(f"hit clients failed: {errors}")
    samples = [s for a in answers for s in a["samples"]]
    outcomes: dict[str, int] = {}
    for a in answers:
        for outcome, count in a["outcomes"].items():
            outcomes[outcome] = outcomes.get(outcome, 0) + count
    seconds = max(a["ended"] for a in answers) - started
    return {
        "prefix_tokens": first["prefix_tokens"],
        "cached_tokens": first["cached_tokens"],
        "single": {
            "clients": 1,
            "acquires": len(single),
            "outcomes": single_outcomes,
            "not_hit": len(single) - single_outcomes.get("hit", 0),
            "ms": _latency(single),
            "seconds": round(single_seconds, 2),
            "acquires_per_second": round(len(single) / single_seconds, 1),
        },
        "concurrent": {
            "clients": HIT_CLIENTS,
            "acquires": len(samples),
            "outcomes": outcomes,
            "not_hit": len(samples) - outcomes.get("hit", 0),
            "ms": _latency(samples),
            "seconds": round(seconds, 2),
            "acquires_per_second": round(len(samples) / seconds, 1),
        },
    }


# --------------------------------------------------------------------------- burst


def _burst_caller(base_url: str, key: str, app: str, body: dict, barrier, answers: list):
    try:
        api = Api(base_url, key, app)
        api.connection.connect()
    except Exception as exc:
        barrier.abort()
        answers.append({"error": f"{type(exc).__name__}: {exc}"})
        return
    try:
        barrier.wait(BARRIER_TIMEOUT_S)
        started = time.perf_counter()
        elapsed, answer = _acquire(api, body)
        answers.append(
            {
                "ms": elapsed,
                "outcome": _outcome(answer),
                "waited": bool(answer["waited"]),
                "ended": started + elapsed / 1000,
            }
        )
    except Exception as exc:
        answers.append({"error": f"{type(exc).__name__}: {exc}"})


def _burst_process(base_url: str, key: str, app: str, bodies: list[dict], barrier, results):
    """A client process running one thread (and connection) per body."""
    answers: list[dict] = []
    threads = [
        threading.Thread(
            target=_burst_caller, args=(base_url, key, app, body, barrier, answers), daemon=True
        )
        for body in bodies
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    results.put(answers)


def burst(api, fake: FakeGeminiCache, label: str) -> dict:
    keys = [_body(f"{label}-burst-{k}", BURST_TIMEOUT_MS) for k in range(BURST_KEYS)]
    callers = [keys[n % BURST_KEYS] for n in range(BURST_KEYS * BURST_CALLERS)]
    shares = [callers[p::BURST_PROCESSES] for p in range(BURST_PROCESSES)]
    context = multiprocessing.get_context("fork")
    barrier, results = context.Barrier(len(callers) + 1), context.Queue()
    processes = [
        context.Process(
            target=_burst_process,
            args=(f"http://{api.host}:{api.port}", api.key, api.app, share, barrier, results),
        )
        for share in shares
    ]
    fake.create_delay_s = BURST_CREATE_DELAY_S
    creates_before = fake.creates
    try:
        for process in processes:
            process.start()
        try:
            barrier.wait(BARRIER_TIMEOUT_S)
        except threading.BrokenBarrierError:
            pass
        started = time.perf_counter()
        answers = [a for _ in processes for a in results.get(timeout=600)]
        for process in processes:
            process.join()
        time.sleep(1.0)  # a late duplicate create would still be counted
        creates = fake.creates - creates_before
    finally:
        fake.create_delay_s = 0.0
    errors = [a["error"] for a in answers if "error" in a]
    if errors:
        raise RuntimeError(f"{len(errors)} burst callers failed, e.g. {errors[:3]}")
    outcomes: dict[str, int] = {}
    for a in answers:
        outcomes[a["outcome"]] = outcomes.get(a["outcome"], 0) + 1
    return {
        "keys": BURST_KEYS,
        "callers": len(answers),
        "provider_creates": creates,
        "outcomes": outcomes,
        "created": outcomes.get("created", 0),
        "hit": outcomes.get("hit", 0),
        "bypass": sum(n for o, n in outcomes.items() if o.startswith("bypass")),
        "waited": sum(1 for a in answers if a["waited"]),
        "wall_seconds": round(max(a["ended"] for a in answers) - started, 3),
        "ms": _latency([a["ms"] for a in answers]),
    }


# --------------------------------------------------------------------------- misses


def misses(api, fake: FakeGeminiCache, label: str) -> dict:
    fake.create_delay_s = 0.0
    creates_before = fake.creates
    samples, outcomes = [], {}
    for k in range(MISS_KEYS):
        elapsed, answer = _acquire(api, _body(f"{label}-miss-{k}", HIT_TIMEOUT_MS))
        samples.append(elapsed)
        outcome = _outcome(answer)
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
    return {
        "keys": MISS_KEYS,
        "outcomes": outcomes,
        "provider_creates": fake.creates - creates_before,
        "ms": _latency(samples),
    }


# --------------------------------------------------------------------------- run, report


def measure(service, api, fake: FakeGeminiCache) -> dict:
    """The prefix-cache figures (the API key needs the ``cache`` scope; the service must
    have been started with ``service_env(fake)``)."""
    label = f"run-{secrets.token_hex(4)}"
    results: dict = {"hits": hits(api, label)}
    print(json.dumps(results["hits"]), flush=True)
    results["burst"] = burst(api, fake, label)
    print(json.dumps(results["burst"]), flush=True)
    results["misses"] = misses(api, fake, label)
    print(json.dumps(results["misses"]), flush=True)
    results["provider_problems"] = len(fake.problems)
    results["failures"] = failures(results)
    for failure in results["failures"]:
        print(f"PREFIX CACHE TARGET NOT MET: {failure}", file=sys.stderr, flush=True)
    return results


def failures(results: dict) -> list[str]:
    found = []
    for phase in ("single", "concurrent"):
        run = results["hits"][phase]
        if run["not_hit"]:
            found.append(f"{run['not_hit']} of {run['acquires']} hit acquires were not hits")
    burst_ = results["burst"]
    if burst_["provider_creates"] != BURST_KEYS:
        found.append(f"the burst made {burst_['provider_creates']} provider creates")
    if burst_["bypass"]:
        found.append(f"{burst_['bypass']} burst acquires bypassed: {burst_['outcomes']}")
    if results["misses"]["outcomes"].get("created", 0) != MISS_KEYS:
        found.append(f"misses answered {results['misses']['outcomes']}")
    if results["provider_problems"]:
        found.append(f"the fake provider refused {results['provider_problems']} requests")
    return found


def _met(ok: bool) -> str:
    return "yes" if ok else "**no**"


def _row(*cells) -> str:
    return "| " + " | ".join(str(cell) for cell in cells) + " |"


def _outcomes(counts: dict[str, int]) -> str:
    return ", ".join(f"{outcome} {n}" for outcome, n in sorted(counts.items()))


def report(results: dict) -> str:
    hit, burst_, miss = results["hits"], results["burst"], results["misses"]
    runs = "\n".join(
        _row(
            run["clients"],
            run["acquires"],
            run["acquires"] - run["not_hit"],
            run["not_hit"],
            run["ms"]["p50"],
            run["ms"]["p95"],
            run["ms"]["max"],
            f"{run['acquires_per_second']:,}",
        )
        for run in (hit["single"], hit["concurrent"])
    )
    not_hit = hit["single"]["not_hit"] + hit["concurrent"]["not_hit"]
    outcomes = _outcomes(burst_["outcomes"])
    burst_ms = " / ".join(str(burst_["ms"][cut]) for cut in ("p50", "p95", "max"))
    targets = "\n".join(
        [
            _row(
                "provider creates in the burst",
                burst_["provider_creates"],
                f"exactly {BURST_KEYS}",
                _met(burst_["provider_creates"] == BURST_KEYS),
            ),
            _row("burst acquires bypassed", burst_["bypass"], 0, _met(burst_["bypass"] == 0)),
            _row("hit-phase acquires not `hit`", not_hit, 0, _met(not_hit == 0)),
            _row(
                "requests the fake provider refused as malformed",
                results["provider_problems"],
                0,
                _met(results["provider_problems"] == 0),
            ),
        ]
    )
    return f"""## Prefix cache

The provider prefix-cache registry (`POST …/cache/acquire`) with scope provider `gemini`
(`{MODEL}`), whose `cachedContents` API is a local fake
(`ctxadmin.testing.fake_gemini_cache`: an HTTP server on 127.0.0.1 in the bench process).
Each prefix is a system instruction and two turns, about {PREFIX_BYTES // 1000} KB
({hit["prefix_tokens"]:,} estimated tokens), sent whole with every acquire; `ttl_ms`
{TTL_MS}. Latencies are client-side, over HTTP.

Hits: one key was created, then acquired {HIT_WARMUP} times to warm up; then one client
acquired it {HIT_ACQUIRES} times, then {HIT_CLIENTS} client processes (each with its own
kept-alive connection) {HIT_ACQUIRES} times each, all at once.

| clients | acquires | hits | not hit | p50 (ms) | p95 (ms) | max (ms) | acquires/s |
| --- | --- | --- | --- | --- | --- | --- | --- |
{runs}

Burst: {burst_["callers"]} acquires over {burst_["keys"]} new prefixes ({BURST_CALLERS} callers
each), every caller a thread with its own connection (in {BURST_PROCESSES} client processes),
released by one barrier; the fake provider took {BURST_CREATE_DELAY_S} s per create and
`timeout_ms` was {BURST_TIMEOUT_MS}. The web server runs 12 requests at a time (3 workers of 4
threads), so most callers queue there, and a caller that joined a create in flight holds its
thread until the create is installed.

| measure | value |
| --- | --- |
| outcomes | {outcomes} |
| callers that joined a create in flight (`waited`) | {burst_["waited"]} |
| wall time, barrier to last answer | {burst_["wall_seconds"]} s |
| latency p50 / p95 / max | {burst_ms} ms |

Misses: {miss["keys"]} new prefixes acquired one after another with no provider delay:
`created` in p50 {miss["ms"]["p50"]} ms, p95 {miss["ms"]["p95"]} ms ({_outcomes(miss["outcomes"])});
that is the registry's own work on a miss (the `creating` row, the create on a creator
thread, encrypting and installing the resource name) plus one create round trip to the fake.

| measure | value | target | met |
| --- | --- | --- | --- |
{targets}

No peer is measured: neither Google ADK nor LangGraph has a prefix-cache registry shared
across processes.
"""


SECTION = "## Prefix cache"


def main() -> None:
    fake = start_provider()
    try:
        service = bench_service(stack.var_dir() / "bench-cache", service_env(fake))
        try:
            api = bench_client(service, "cache", "cache")
            results = measure(service, api, fake)
            postgres = postgres_version(service.database_url)
        finally:
            stop_service(service)
    finally:
        fake.stop()
    section = report(results)
    box = machine()
    stamp = (
        f"\n\nRecorded by `.venv/bin/python -m bench.cache_bench` on "
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC ({box['cpu']}, {box['cores']} cores, "
        f"PostgreSQL {postgres}; one machine for client, server, database and fake provider).\n"
    )
    section = section.replace(
        "\n\nThe provider prefix-cache registry", stamp + "\nThe provider prefix-cache registry", 1
    )
    REPORT.write_text(splice(REPORT.read_text(), section, SECTION))
    print(section)
    if results["failures"]:
        sys.exit("prefix cache targets not met: " + "; ".join(results["failures"]))


if __name__ == "__main__":
    main()
