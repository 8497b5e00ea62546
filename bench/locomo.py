"""LoCoMo replay with automatic compaction (part of ``make bench``).

Each LoCoMo session of a conversation is one invocation: its turns are appended as events
(speaker A as the user, speaker B as the agent; the last one completes the invocation), and
before each invocation the next model call's context is built. Three ctxadmin sessions per
conversation see the same events:

- ``compacted``: automatic compaction, extractive summarizer, token threshold 4,000,
  retaining 4 units (run by the Celery worker after each invocation);
- ``raw``: no compaction (what a call costs without it);
- ``window``: ADK's sliding window alone (compaction interval 2, overlap 1), also extractive.

Per call: context tokens of each; per compaction: its time (engine and commit, as the
checkpoint records it). At the end, the share of the evidence turns of the LoCoMo questions
whose exact user words survive, as a summary's quoted request or a retained raw event.
"""

from __future__ import annotations

import itertools
import json
import re
import statistics
import time
from datetime import UTC, datetime
from pathlib import Path

from ctxadmin import stack

DATA = Path(stack.PROJECT_DIR).parent / "shared" / "data" / "locomo_dev.json"
COMPACTED = {
    "token_threshold": 4000,
    "retain_recent_exchanges": 4,
    "summarizer": {"kind": "extractive"},
    "automatic": True,
}
WINDOW = {
    "token_threshold": None,
    "compaction_interval": 2,
    "overlap_size": 1,
    "summarizer": {"kind": "extractive"},
    "automatic": True,
}
_DATE = re.compile(r"(\d+):(\d+) (am|pm) on (\d+) (\w+), (\d+)")


def session_time(text: str) -> datetime:
    """``"1:56 pm on 8 May, 2023"`` as a UTC time."""
    hour, minute, half, day, month, year = _DATE.match(text).groups()
    hour = int(hour) % 12 + (12 if half == "pm" else 0)
    parsed = datetime.strptime(f"{day} {month} {year}", "%d %B %Y")
    return parsed.replace(hour=hour, minute=int(minute), tzinfo=UTC)


def invocations(sample: dict, named: bool = False) -> list[tuple[str, list[dict]]]:
    """The conversation's LoCoMo sessions as invocations of events: speaker A's turns are
    the user's (author ``user``), speaker B's the agent's (author ``assistant``, or with
    ``named`` B's name, as an agent's events carry its name)."""
    conversation = sample["conversation"]
    speaker_a = conversation["speaker_a"]
    numbers = sorted(
        int(key.split("_")[1])
        for key in conversation
        if re.fullmatch(r"session_\d+", key) and conversation[key]
    )
    result = []
    for number in numbers:
        start = session_time(conversation[f"session_{number}_date_time"]).timestamp()
        invocation = f"{sample['sample_id']}-s{number}"
        turns = conversation[f"session_{number}"]
        events = []
        for index, turn in enumerate(turns):
            user = turn["speaker"] == speaker_a
            events.append(
                {
                    "event_id": turn["dia_id"],
                    "invocation_id": invocation,
                    "author": "user" if user else turn["speaker"] if named else "assistant",
                    "content": {
                        "role": "user" if user else "model",
                        "parts": [{"text": turn["text"]}],
                    },
                    "timestamp": start + index,
                    "turn_complete": True if index == len(turns) - 1 else None,
                }
            )
        result.append((invocation, events))
    return result


def evidence(sample: dict) -> set[str]:
    ids: set[str] = set()
    for qa in sample["qa"]:
        for entry in qa.get("evidence", []):
            ids.update(part for part in re.split(r"[;,\s]+", entry) if part)
    return ids


def _wait_idle(api, url: str, timeout: float = 120.0) -> None:
    """Until the session has no compaction pending or running (the worker's turn)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        newest = api.get(f"{url}/compactions", limit=1)["results"]
        if not newest or newest[0]["status"] not in ("pending", "running"):
            return
        time.sleep(0.1)
    raise RuntimeError("compaction did not finish in time")


def _context_tokens(api, url: str, current: dict) -> tuple[int, dict]:
    body = api.post(f"{url}/context", {"current_input": current})
    return body["accounting"]["tokens"]["total"], body


def _visible_summaries(api, url: str) -> list[dict]:
    summaries, cursor = [], None
    while True:
        page = api.get(f"{url}/compactions", **({"cursor": cursor} if cursor else {}))
        for row in page["results"]:
            if row["status"] in ("active", "superseded") and row["subsumed_by"] is None:
                detail = api.get(f"{url}/compactions/{row['compaction_id']}")
                if detail["summary"]:
                    summaries.append(detail["summary"])
        if not page["next"]:
            return summaries
        cursor = re.search(r"cursor=([^&]+)", page["next"]).group(1)


def replay(api, sample: dict) -> dict:
    user = f"locomo-{sample['sample_id']}"
    urls = {}
    for kind, policy in (("compacted", COMPACTED), ("raw", None), ("window", WINDOW)):
        sid = f"{kind}"
        api.create_session(user, sid)
        urls[kind] = f"{api.sessions(user)}/{sid}"
        if policy is not None:
            status, body = api.request("PUT", f"{urls[kind]}/compaction-policy", policy)
            if status != 200:
                raise RuntimeError(f"policy refused: {body}")
    calls = []
    for invocation, events in invocations(sample):
        current = events[0]["content"]
        row = {"invocation": invocation}
        for kind, url in urls.items():
            row[kind], _body = _context_tokens(api, url, current)
        calls.append(row)
        for url in urls.values():
            for index in range(0, len(events), 500):
                api.post(f"{url}/events", {"events": events[index : index + 500]})
        for kind in ("compacted", "window"):
            _wait_idle(api, urls[kind])
    compactions = []
    for kind in ("compacted", "window"):
        page = api.get(f"{urls[kind]}/compactions", limit=200)["results"]
        compactions.append(
            {
                "kind": kind,
                "durations_ms": [r["duration_ms"] for r in page if r["status"] != "failed"],
                "failed": [r["error"]["code"] for r in page if r["status"] == "failed"],
                "count": sum(1 for r in page if r["status"] in ("active", "superseded")),
            }
        )
    # Quality: evidence turns of the user whose exact words survive the compaction.
    speaker_a = sample["conversation"]["speaker_a"]
    user_turns = {
        turn["dia_id"]: turn["text"]
        for key, turns in sample["conversation"].items()
        if re.fullmatch(r"session_\d+", key)
        for turn in turns
        if turn["speaker"] == speaker_a
    }
    wanted = evidence(sample) & set(user_turns)
    final, body = _context_tokens(
        api, urls["compacted"], {"role": "user", "parts": [{"text": "?"}]}
    )
    raw_ids = {item.get("event_id") for item in body["envelope"]["history"]}
    quoted = {
        request["event_id"]
        for summary in _visible_summaries(api, urls["compacted"])
        for request in summary["user_requests"]
        if "excerpt" in request and request["excerpt"] in user_turns.get(request["event_id"], "")
    }
    survived = {dia for dia in wanted if dia in raw_ids or dia in quoted}
    return {
        "sample_id": sample["sample_id"],
        "invocations": len(calls),
        "events": sum(len(events) for _inv, events in invocations(sample)),
        "calls": calls,
        "compactions": compactions,
        "evidence_user_turns": len(wanted),
        "evidence_survived": len(survived),
        "final_context_tokens": final,
    }


def _pct(samples: list[float], q: int) -> float:
    if len(samples) < 2:
        return round(samples[0], 2) if samples else 0.0
    return round(statistics.quantiles(samples, n=100, method="inclusive")[q - 1], 2)


def measure(api) -> dict:
    samples = json.loads(DATA.read_text())
    conversations = [replay(api, sample) for sample in samples]
    durations = [
        d
        for c in conversations
        for k in c["compactions"]
        if k["kind"] == "compacted"
        for d in k["durations_ms"]
    ]
    at10 = [c["calls"][9] for c in conversations if len(c["calls"]) >= 10]
    reduction_at_10 = [1 - call["compacted"] / call["raw"] for call in at10]
    return {
        "conversations": conversations,
        "reduction_at_10": round(100 * statistics.mean(reduction_at_10), 1),
        "reduction_at_10_each": [round(100 * r, 1) for r in reduction_at_10],
        "reduction_last": [
            round(100 * (1 - c["calls"][-1]["compacted"] / c["calls"][-1]["raw"]), 1)
            for c in conversations
        ],
        "max_context_compacted": max(
            call["compacted"] for c in conversations for call in c["calls"]
        ),
        "max_context_window": max(call["window"] for c in conversations for call in c["calls"]),
        "max_context_raw": max(call["raw"] for c in conversations for call in c["calls"]),
        "compaction_ms": {
            "p50": _pct(durations, 50),
            "p95": _pct(durations, 95),
            "n": len(durations),
        },
        "evidence_survival": round(
            100
            * sum(c["evidence_survived"] for c in conversations)
            / max(1, sum(c["evidence_user_turns"] for c in conversations)),
            1,
        ),
    }


def _growth(conversation: dict) -> int:
    """The most tokens one invocation added (calls are made before each invocation)."""
    raw = [call["raw"] for call in conversation["calls"]]
    return max((later - earlier for earlier, later in itertools.pairwise(raw)), default=0)


def report(results: dict) -> str:
    """The section of BENCHMARKS.md."""
    conversations = results["conversations"]
    lines = []
    for c in conversations:
        calls = c["calls"]
        picks = sorted({0, 4, 9, 14, len(calls) - 1} & set(range(len(calls))))
        cells = ", ".join(
            f"{i + 1}: {calls[i]['compacted']} / {calls[i]['window']} / {calls[i]['raw']}"
            for i in picks
        )
        compacted = next(k for k in c["compactions"] if k["kind"] == "compacted")
        lines.append(
            f"| {c['sample_id']} | {c['invocations']} | {c['events']} | {cells} | "
            f"{compacted['count']} | {c['evidence_survived']}/{c['evidence_user_turns']} |"
        )
    ms = results["compaction_ms"]
    largest = results["max_context_compacted"]
    bound = COMPACTED["token_threshold"] + max(_growth(c) for c in conversations)

    def met(ok: bool) -> str:
        return "yes" if ok else "**no**"

    rows = [
        (
            "context reduction at the 10th call (mean of the conversations; each "
            f"{results['reduction_at_10_each']})",
            f"{results['reduction_at_10']}%",
            ">= 70%",
            met(results["reduction_at_10"] >= 70),
        ),
        ("context reduction at the last call (each, %)", results["reduction_last"], "—", "—"),
        (
            "largest context with compaction (tokens)",
            largest,
            f"flat: <= threshold + the largest invocation = {bound}",
            met(largest <= bound),
        ),
        (
            "largest context with ADK's sliding window alone / without compaction",
            f"{results['max_context_window']} / {results['max_context_raw']}",
            "grows with the conversation",
            "—",
        ),
        (
            f"compaction time, extractive, engine + commit (p50 / p95 ms, n={ms['n']})",
            f"{ms['p50']} / {ms['p95']}",
            "p50 <= 20 ms",
            met(ms["p50"] <= 20),
        ),
        (
            "evidence turns of the user whose exact words survive (summary quote or raw)",
            f"{results['evidence_survival']}%",
            "quality check",
            "—",
        ),
    ]
    table = "\n".join(f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows)
    return f"""## Compaction: LoCoMo replay

Three LoCoMo conversations (`../shared/data/locomo_dev.json`), each LoCoMo session one
invocation; before each invocation the next call's context is built (its first turn as the
current input). Automatic compaction runs in the Celery worker after each invocation:
`{json.dumps(COMPACTED)}`. The same events go to a session without compaction and to one
with ADK's sliding window alone (`{json.dumps(WINDOW)}`). Tokens are ctxadmin's estimate
(4 bytes per token) of the whole request.

| measure | result | target | met |
| --- | --- | --- | --- |
{table}

Context tokens per call (call number: compacted / sliding window / no compaction):

| conversation | invocations | events | tokens at calls | compactions | evidence survived |
| --- | --- | --- | --- | --- | --- |
{chr(10).join(lines)}
"""
