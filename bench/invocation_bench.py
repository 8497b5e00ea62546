"""Invocation overhead: what ctxadmin adds to one model call.

``make bench`` runs it against its service; alone, ``python -m bench.invocation_bench``
starts a service of its own (in ``var/bench-invocation``) and rewrites the "Invocations"
section of ``bench/BENCHMARKS.md``.

Each measured invocation goes to its own session holding 200 prior events (100 exchanges),
so every one of them sees the same history: the input is appended, the context built
(instructions, 4 tool declarations, the 200 events), the ``fake`` model called (0 ms), its
answer appended, and the answer returned. Overhead is the client-side time of the request
minus the provider time the response reports (``timings.provider_ms``); the server-side
``timings.total_ms`` minus the provider time is reported beside it.
"""

from __future__ import annotations

import statistics
import time

from bench.alone import run_alone
from bench.service import bench_client

PRIOR_EVENTS = 200
SESSIONS = 120
WARMUP = 20
TARGET_P50_MS = 30.0
SECTION = "## Invocations"
DECLARATIONS = [
    {
        "name": name,
        "description": f"{name.replace('_', ' ')} for the traveller",
        "parameters": {"type": "object", "properties": {"ref": {"type": "string"}}},
    }
    for name in ("lookup_booking", "change_seat", "cancel_booking", "send_receipt")
]


def _history(n: int) -> list[dict]:
    events = []
    for i in range(PRIOR_EVENTS // 2):
        events.append(
            {
                "event_id": f"u{i}",
                "invocation_id": f"old-{i}",
                "author": "user",
                "content": {
                    "role": "user",
                    "parts": [{"text": f"Session {n}, question {i}: can I move my flight?"}],
                },
            }
        )
        events.append(
            {
                "event_id": f"m{i}",
                "invocation_id": f"old-{i}",
                "author": "model",
                "turn_complete": True,
                "content": {
                    "role": "model",
                    "parts": [{"text": f"Answer {i}: yes, flights can move up to a day."}],
                },
            }
        )
    return events


def _percentiles(samples: list[float]) -> dict[str, float]:
    cuts = statistics.quantiles(samples, n=100, method="inclusive")
    return {"p50": round(cuts[49], 2), "p95": round(cuts[94], 2), "max": round(max(samples), 2)}


def measure(api) -> dict:
    user = "bench-invoker"
    sessions = api.sessions(user)
    # Every measured call must see the same 200 events: no compaction shortens them.
    status, answer = api.request(
        "PUT", f"/api/v1/apps/{api.app}/compaction-policy", {"automatic": False}
    )
    if status != 200:
        raise RuntimeError(f"compaction policy refused: {status} {answer}")
    for n in range(SESSIONS + WARMUP):
        sid = f"inv-{n}"
        api.create_session(user, sid)
        api.post(f"{sessions}/{sid}/events", {"events": _history(n)})
    client_overhead, server_overhead, totals, provider = [], [], [], []
    for n in range(SESSIONS + WARMUP):
        body = {
            "invocation_id": f"bench-{n}",
            "input": {"role": "user", "parts": [{"text": "Please move my flight to Friday."}]},
            "agent": {
                "provider": "fake",
                "model": "fake-1",
                "instructions": "You are the travel desk's assistant. Be brief and exact.",
                "declarations": DECLARATIONS,
            },
            "cache": "off",
        }
        started = time.perf_counter()
        status, answer = api.request("POST", f"{sessions}/inv-{n}/invocations", body)
        elapsed = (time.perf_counter() - started) * 1000
        if status != 201:
            raise RuntimeError(f"invocation failed: {status} {str(answer)[:300]}")
        if n < WARMUP:
            continue
        timings = answer["timings"]
        totals.append(elapsed)
        provider.append(timings["provider_ms"])
        client_overhead.append(elapsed - timings["provider_ms"])
        server_overhead.append(timings["total_ms"] - timings["provider_ms"])
        if answer["context"]["events"] != PRIOR_EVENTS:
            raise RuntimeError(f"the context held {answer['context']['events']} events")
    return {
        "invocations": len(totals),
        "client_overhead": _percentiles(client_overhead),
        "server_overhead": _percentiles(server_overhead),
        "total": _percentiles(totals),
        "provider": _percentiles(provider),
    }


def report(results: dict) -> str:
    client, server = results["client_overhead"], results["server_overhead"]
    met = "yes" if client["p50"] <= TARGET_P50_MS else "**no**"
    rows = "\n".join(
        f"| {label} | {values['p50']} | {values['p95']} | {values['max']} |"
        for label, values in (
            ("overhead, client-side (HTTP round trip included)", client),
            ("overhead, server-side (`total_ms - provider_ms`)", server),
            ("whole request, client-side", results["total"]),
            ("provider (`fake`, 0 ms)", results["provider"]),
        )
    )
    return f"""{SECTION}

`POST …/sessions/{{sid}}/invocations` with the `fake` model at 0 ms, one after another from
one client; each of the {results["invocations"]} measured invocations (after {WARMUP} warm-up
ones) goes to its own session of {PRIOR_EVENTS} prior events, so each builds a context of the
same {PRIOR_EVENTS} events, 4 tool declarations and instructions, appends the input and the
answer, and returns. Overhead = the request's time minus the provider time it reports.

| measure | p50 (ms) | p95 (ms) | max (ms) |
| --- | --- | --- | --- |
{rows}

| target | value | met |
| --- | --- | --- |
| overhead p50 <= {TARGET_P50_MS:g} ms | {client["p50"]} ms | {met} |
"""


def main() -> None:
    run_alone(
        "invocation_bench",
        "bench-invocation",
        SECTION,
        lambda service: measure(bench_client(service, "invoke", "sessions")),
        report,
        "\n\n`POST",
    )


if __name__ == "__main__":
    main()
