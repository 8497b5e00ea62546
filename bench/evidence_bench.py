"""Evidence in context: at a fixed request budget, how much of what the next question needs
does the built context hold (part of ``make bench``; alone: ``python -m bench --only
evidence``, which starts a service of its own in ``var/bench-evidence``).

The three LoCoMo dev conversations are replayed as sessions (each LoCoMo session one
invocation, speaker A as the user, speaker B as the agent, named after B): one session
without compaction (``raw``), one with
automatic extractive compaction at a token threshold of 4,000 (``compacted``), and one with
ADK's sliding-window compaction (``window``: compaction interval 2, overlap 1, extractive
summaries). The raw session's events are then ingested into the user's memory through the
outbox. Every question of categories 1 to 4 becomes the current input of
``POST .../context`` at ``max_request_tokens`` B (overflow ``truncate``), and its coverage
is the share of its evidence turns whose whole text appears in the envelope (history,
summaries and the memory slot; the current input is not counted).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import statistics
import time
from datetime import UTC, datetime

from bench import locomo
from bench.sections import REPORT, splice
from bench.service import bench_client, bench_service, stop_service
from ctxadmin import stack

SECTION = "## Evidence in context"
BUDGETS = (2048, 4096, 8192)
CATEGORIES = (1, 2, 3, 4)
# Memory as a caller sized it before the slot was packed: ten hits, the old default caps.
BASELINE_MEMORY = {"mode": "hybrid", "limit": 10, "max_hit_bytes": 2048, "max_total_bytes": 8192}
# The full builder: compaction, memory packed into what the request budget leaves.
FULL_MEMORY = {"mode": "hybrid", "limit": 100}
# What a caller gets who names only the query: the context request's defaults.
DEFAULT_MEMORY: dict = {}
# The defaults are the best configuration measured when they are within this of the full
# builder at every budget (the full builder's run-to-run spread is about 0.003).
DEFAULTS_SPREAD = 0.01
COLUMNS = (
    # (name, session, memory retrieval or None)
    ("truncate", "raw", None),
    ("compacted", "compacted", None),
    ("truncate + memory", "raw", BASELINE_MEMORY),
    ("full builder", "compacted", FULL_MEMORY),
    ("defaults", "compacted", DEFAULT_MEMORY),
    ("ADK sliding window", "window", None),
)
_ENTITIES = {"&lt;": "<", "&gt;": ">", "&amp;": "&"}


def _texts(value, out: list[str]) -> None:
    if isinstance(value, str):
        out.append(value)
    elif isinstance(value, dict):
        for item in value.values():
            _texts(item, out)
    elif isinstance(value, list):
        for item in value:
            _texts(item, out)


def envelope_text(envelope: dict) -> str:
    """The text a model reads of the history and the memory slot (memory's escaping undone)."""
    history: list[str] = []
    _texts(envelope.get("history") or [], history)
    memory: list[str] = []
    _texts(envelope.get("memory") or [], memory)
    unescaped = [re.sub("&(lt|gt|amp);", lambda m: _ENTITIES[m.group(0)], t) for t in memory]
    return "\n".join(history + unescaped)


def _questions(sample: dict) -> list[tuple[str, list[str]]]:
    turns = {
        turn["dia_id"]: turn["text"]
        for key, session in sample["conversation"].items()
        if re.fullmatch(r"session_\d+", key)
        for turn in session
    }
    questions = []
    for qa in sample["qa"]:
        if qa["category"] not in CATEGORIES:
            continue
        ids = {
            part for entry in qa.get("evidence", []) for part in re.split(r"[;,\s]+", entry) if part
        }
        texts = [turns[i] for i in sorted(ids) if i in turns]
        if texts:
            questions.append((qa["question"], texts))
    return questions


def _ingest(api, user: str, sid: str, timeout: float = 900.0) -> list[str]:
    """Ingest the session through the outbox and wait for its jobs to end; their ids."""
    base = f"/api/v1/apps/{api.app}/users/{user}/memories"
    after, jobs = 0, []
    while True:
        status, body = api.request(
            "POST", f"{base}/ingestions", {"session_id": sid, "after_seq": after}
        )
        if status not in (200, 202):
            raise RuntimeError(f"admission failed: {status} {str(body)[:300]}")
        jobs.append(body["job_id"])
        if not body.get("more"):
            break
        after = body["next_after_seq"]
    deadline = time.monotonic() + timeout
    for job in jobs:
        while api.get(f"/api/v1/apps/{api.app}/outbox/jobs/{job}")["phase"] not in (
            "completed",
            "failed",
            "cancelled",
        ):
            if time.monotonic() > deadline:
                raise RuntimeError("ingestion did not finish in time")
            time.sleep(0.2)
    return jobs


def replay(api, sample: dict, columns=COLUMNS) -> dict[str, str]:
    """The conversation's sessions the columns read, replayed; their URLs by kind."""
    user = f"evidence-{sample['sample_id']}"
    urls = {}
    kinds = {kind for _n, kind, _m in columns} | {"raw"}
    for kind, policy in (("compacted", locomo.COMPACTED), ("raw", None), ("window", locomo.WINDOW)):
        if kind not in kinds:
            continue
        api.create_session(user, kind)
        urls[kind] = f"{api.sessions(user)}/{kind}"
        if policy is not None:
            status, body = api.request("PUT", f"{urls[kind]}/compaction-policy", policy)
            if status != 200:
                raise RuntimeError(f"policy refused: {body}")
    for _invocation, events in locomo.invocations(sample, named=True):
        for url in urls.values():
            api.post(f"{url}/events", {"events": events})
        for kind in ("compacted", "window"):
            if kind in urls:
                locomo._wait_idle(api, urls[kind])
    if any(memory is not None for _n, _k, memory in columns):
        _ingest(api, user, "raw")
    return urls


def _body(question: str, budget: int, memory: dict | None) -> dict:
    body = {
        "current_input": {"role": "user", "parts": [{"text": question}]},
        "policy": {"budgets": {"max_request_tokens": budget}, "overflow": "truncate"},
    }
    if memory is not None:
        body["memory"] = {"query": question, **memory}
    return body


def _pct(samples: list[float], q: int) -> float:
    if len(samples) < 2:
        return round(samples[0], 2) if samples else 0.0
    return round(statistics.quantiles(samples, n=100, method="inclusive")[q - 1], 2)


def measure(api, columns=COLUMNS) -> dict:
    samples = json.loads(locomo.DATA.read_text())
    cells: dict[tuple[str, int], dict[str, list]] = {
        (name, budget): {"coverage": [], "tokens": [], "build_ms": []}
        for name, _s, _m in columns
        for budget in BUDGETS
    }
    load = []
    full_tokens = []
    questions = 0
    for sample in samples:
        urls = replay(api, sample, columns)
        load.append(os.getloadavg()[0])
        for question, texts in _questions(sample):
            questions += 1
            for name, kind, memory in columns:
                for budget in BUDGETS:
                    answer = api.post(f"{urls[kind]}/context", _body(question, budget, memory))
                    blob = envelope_text(answer["envelope"])
                    cell = cells[(name, budget)]
                    cell["coverage"].append(sum(t in blob for t in texts) / len(texts))
                    cell["tokens"].append(answer["accounting"]["tokens"]["total"])
                    cell["build_ms"].append(answer["accounting"]["build_ms"])
            whole = api.post(
                f"{urls['raw']}/context",
                {"current_input": {"role": "user", "parts": [{"text": question}]}},
            )
            full_tokens.append(whole["accounting"]["tokens"]["total"])
    load.append(os.getloadavg()[0])
    return {
        "questions": questions,
        "full_tokens": round(statistics.mean(full_tokens)),
        "load": [round(x, 2) for x in load],
        "cells": {
            f"{name}@{budget}": {
                "coverage": round(statistics.mean(c["coverage"]), 3),
                "tokens": round(statistics.mean(c["tokens"])),
                "build_p50_ms": _pct(c["build_ms"], 50),
                "build_p95_ms": _pct(c["build_ms"], 95),
            }
            for (name, budget), c in cells.items()
        },
    }


# What each lever gained, measured with this benchmark one step after the other (the full
# builder's coverage at 2,048 / 4,096 / 8,192 tokens; build p50 at 4,096; hashing embedder).
_LEVER_ROWS = (
    (
        "before: compacted session + memory, 10 hybrid hits, each its own item with the "
        "preamble, 8 KiB cap",
        "0.57 | 0.59 | 0.61 | 5.6",
    ),
    (
        "memory packed into what the budget leaves (50 hits, no text twice, preamble once, "
        "recent history first up to 25% of the room)",
        "0.61 | 0.68 | 0.74 | 9.5",
    ),
    (
        "the slot as one item holding every hit (a hit costs its text and ~70 bytes, not ~220)",
        "0.66 | 0.72 | 0.74 | 11.5",
    ),
    ("up to 100 hits (50 no longer filled 4,096 tokens)", "0.66 | 0.73 | 0.78 | 6.7"),
    (
        "author and day searched with the content, and said on each hit (`from`, `on`)",
        "0.67 | 0.75 | 0.79 | 6.3",
    ),
    (
        "recent history's first share 10% of the room, not 25% (25% was lower at every budget)",
        "0.69 | 0.76 | 0.79 | 10.9",
    ),
    (
        "the ten best hits each with the turns said just before and after it",
        "0.76 | 0.85 | 0.87 | 14.2",
    ),
)
LEVERS = (
    "| step | 2,048 | 4,096 | 8,192 | p50 ms at 4,096 |\n| --- | --- | --- | --- | --- |\n"
    + "".join(f"| {step} | {cells} |\n" for step, cells in _LEVER_ROWS)
)
# What the compacted column's levers gained (coverage at 2,048 / 4,096 / 8,192 tokens of
# the compacted column, then of the full builder; hashing embedder, ``--columns``).
_SUMMARY_ROWS = (
    (
        "before: the user's turns as 160-character prefixes, tool outcomes, the latest "
        "answer; oldest dropped first",
        "0.040 / 0.094 / 0.094",
        "0.755 / 0.846 / 0.872",
    ),
    (
        "both sides' statements of fact whole, as exact cited excerpts, kept by facts per "
        "byte (at most a third of the range's bytes)",
        "0.040 / 0.163 / 0.163",
        "0.760 / 0.846 / 0.873",
    ),
    (
        "recall: under audit retention, the events a checkpoint hides that best match the "
        "current input (BM25) restored as exact, cited excerpts right after its summary, in "
        "what the budget leaves (the full builder in three runs; without recall 0.755 / "
        "0.845 / 0.874 twice)",
        "0.040 / 0.488 / 0.699",
        "0.755 / 0.847 / 0.877, 0.754 / 0.843 / 0.876, 0.757 / 0.846 / 0.876",
    ),
)
SUMMARY_LEVERS = "| step | compacted | full builder |\n| --- | --- | --- |\n" + "".join(
    f"| {step} | {a} | {b} |\n" for step, a, b in _SUMMARY_ROWS
)


def local_section(local: dict | None) -> str:
    """The same run with the local MiniLM embedder, when it was measured."""
    if local is None:
        return ""
    cells = local["cells"]
    rows = "\n".join(
        f"| {b:,} | "
        + " | ".join(
            f"{cells[f'{n}@{b}']['coverage']:.3f} ({cells[f'{n}@{b}']['build_p50_ms']} ms)"
            for n in ("truncate + memory", "full builder", "defaults")
        )
        + " |"
        for b in BUDGETS
    )
    return f"""
With the local MiniLM embedder (`CTXADMIN_EMBEDDER=local`, the same replay in a service of
its own; load average {local["load"]}): coverage (build p50) of the columns with memory.

| B | truncate + memory | full builder | defaults |
| --- | --- | --- | --- |
{rows}
"""


def report(results: dict, command: str, local: dict | None = None) -> str:
    cells = results["cells"]
    names = [name for name, _s, _m in COLUMNS]
    head = "| B | " + " | ".join(names) + " |"
    rule = "| --- " * (len(names) + 1) + "|"
    coverage = [
        f"| {b:,} | " + " | ".join(f"{cells[f'{n}@{b}']['coverage']:.2f}" for n in names) + " |"
        for b in BUDGETS
    ]
    tokens = [
        f"| {b:,} | " + " | ".join(str(cells[f"{n}@{b}"]["tokens"]) for n in names) + " |"
        for b in BUDGETS
    ]
    builds = [
        f"| {b:,} | "
        + " | ".join(
            f"{cells[f'{n}@{b}']['build_p50_ms']} / {cells[f'{n}@{b}']['build_p95_ms']}"
            for n in names
        )
        + " |"
        for b in BUDGETS
    ]

    def met(ok: bool) -> str:
        return "yes" if ok else "**no**"

    def goals(full_cells: dict) -> list[str]:
        """The goal's four rows for one embedder's full builder (truncation uses no memory,
        so it is the same under either embedder)."""
        at = {b: full_cells[f"full builder@{b}"] for b in BUDGETS}
        below = all(at[b]["coverage"] >= cells[f"truncate@{b}"]["coverage"] for b in BUDGETS)
        p50 = max(at[b]["build_p50_ms"] for b in BUDGETS)
        gap = max(at[b]["coverage"] - full_cells[f"defaults@{b}"]["coverage"] for b in BUDGETS)
        return [
            f"{at[4096]['coverage']:.3f} ({met(at[4096]['coverage'] >= 0.85)})",
            f"{at[2048]['coverage']:.3f} ({met(at[2048]['coverage'] >= 0.70)})",
            f"{below} ({met(below)})",
            f"{p50} ms ({met(p50 <= 25)})",
            f"{gap:.3f} ({met(gap <= DEFAULTS_SPREAD)})",
        ]

    labels = (
        "full builder coverage at B = 4,096 >= 0.85",
        "full builder coverage at B = 2,048 >= 0.70",
        "full builder never below truncate",
        "full builder build p50 <= 25 ms (worst budget)",
        f"the defaults no more than {DEFAULTS_SPREAD} below the full builder (worst budget)",
    )
    hashing_goals = goals(cells)
    local_goals = goals(local["cells"]) if local else ["not measured"] * len(labels)
    goal_rows = "\n".join(
        f"| {label} | {ours} | {theirs} |"
        for label, ours, theirs in zip(labels, local_goals, hashing_goals, strict=True)
    )

    return f"""{SECTION}

Recorded by `{command}` on {datetime.now(UTC):%Y-%m-%d %H:%M} UTC; load average (1 min)
after each conversation's replay and at the end: {results["load"]} on 2 shared cores.

The three LoCoMo dev conversations replayed as sessions (speaker A as the user, each LoCoMo
session one invocation, speaker B as the agent, named after B): without compaction
(truncate), with automatic extractive compaction
(`{json.dumps(locomo.COMPACTED)}`), and with ADK's sliding-window compaction as ctxadmin runs
it (`{json.dumps(locomo.WINDOW)}`); the raw session's events ingested into the user's memory
through the outbox (the hashing embedder). Each of the {results["questions"]}
questions of categories 1 to 4 is the current input of `POST .../context` with
`max_request_tokens` B and overflow `truncate`. Coverage: the share of the question's
evidence turns whose whole text appears in the envelope's history (summaries included) or
memory slot, averaged over the questions. Columns: truncate (no compaction, no memory),
compacted, truncate + memory (`{json.dumps(BASELINE_MEMORY)}`, default byte caps), the full
builder (compacted session, memory `{json.dumps(FULL_MEMORY)}`), the defaults (the same
session, memory `{{"query": ...}}` and nothing else: what a caller gets who sets nothing), ADK's
sliding window.
The whole conversation is 1.00 at about {results["full_tokens"]:,} tokens.

Coverage:

{head}
{rule}
{chr(10).join(coverage)}

The defaults: while a retrieval without `limit` asked for 5 hits, the query alone got
0.672 / 0.731 / 0.814 (the full builder 0.755 / 0.844 / 0.876 in the same run, `--columns`);
now it asks for as many hits as the slot could hold, up to 100 (from about 1,850 tokens of
budget on, 100), and is the full builder's configuration.

Mean tokens used (of B):

{head}
{rule}
{chr(10).join(tokens)}

Server-side build time, p50 / p95 ms (`accounting.build_ms`, memory search included):

{head}
{rule}
{chr(10).join(builds)}

What each lever gained (one run per step, on the same data; the 4,096 figure of the last
step is 0.847):

{LEVERS}
Tried and not kept: recent history's first share at 5% (0.764 / 0.846 / 0.872: within the
noise of 10%, with fewer recent turns); neighbours for the 20 best hits (0.754 / 0.839 /
0.884: lower at 2,048 and 4,096); the speaker's name as the author of both sides' turns
(compaction takes only `user` as the user, so the compacted session kept less). The local
MiniLM embedder raises coverage (below) for some 11 ms of build time.

Where the rest is lost: memory search itself. Its evidence recall (the share of a
question's evidence turns among the top k hits, hybrid, hashing embedder) is 0.57 at 10,
0.69 at 40 and 0.76 at 100 hits; with the speaker and the day searched, 0.62, 0.74 and 0.79;
with the local MiniLM embedder, 0.57, 0.70 and 0.82. The packed slot reaches about what
recall at 60-80 hits allows, and the neighbours add the turns the search did not rank.
The full builder's coverage comes from memory, so it is about the same over the raw
session.

The compacted column: what the summaries keep, and what recall restores. A compacted
session's history stays under the compaction threshold (4,000 tokens), and truncation keeps
the newest turns that fit, the summary being the oldest item: at 2,048 it is seldom kept.
Recall fills what the budget leaves with the hidden events that best match the question, so
the budget is no longer mostly unused at 4,096 and 8,192; at 2,048 the summary is seldom
kept, and recall follows a kept summary only. The full builder packs memory first, so recall
only uses what memory leaves: its figures moved within the run-to-run spread (about 0.003).
Recall also serves the sliding window's summaries: its column went from 0.02 / 0.14 / 0.32
to 0.02 / 0.19 / 0.38.
What the compacted column's levers gained (coverage at 2,048 / 4,096 / 8,192):

{SUMMARY_LEVERS}
Tried and not kept: a summary target of half the threshold's bytes, not a quarter (compacted
0.024 / 0.208 / 0.208, full builder 0.759 / 0.846 / 0.869: the bigger summary is dropped
more often at 2,048, and the full builder was lower at 8,192). The same summaries serve the
sliding window (extractive): its column went from 0.03 / 0.09 / 0.14 to 0.02 / 0.14 / 0.32.

The goal, with the default embedder (`local`, all-MiniLM-L6-v2, wherever its extra is
installed: `make run` installs it) and with the hashing embedder (the default without it):

| goal | local (the default) | hashing |
| --- | --- | --- |
{goal_rows}
{local_section(local)}"""


def _measured(command: str, extra_env: dict[str, str] | None, columns=COLUMNS) -> dict:
    service = bench_service(stack.var_dir() / "bench-evidence", extra_env)
    try:
        return measure(bench_client(service, "evidence", "sessions", "memory"), columns)
    finally:
        stop_service(service)


def run_columns(names: list[str]) -> dict:
    """Some of the columns, with the default embedder alone, printed (for comparing one
    change quickly; ``BENCHMARKS.md`` is left as it is)."""
    known = {name for name, _s, _m in COLUMNS}
    unknown = sorted(set(names) - known)
    if unknown:
        raise SystemExit(f"unknown columns {unknown}; known: {sorted(known)}")
    results = _measured("", None, [c for c in COLUMNS if c[0] in names])
    print(json.dumps(results, indent=2), flush=True)
    return results


def run_section(command: str) -> dict:
    """Measure with the hashing embedder, then with the local one (the default where it is
    installed), each in a service of its own, and rewrite the section of ``BENCHMARKS.md``."""
    results = _measured(command, None)
    print(json.dumps(results), flush=True)
    local = None
    if importlib.util.find_spec("onnxruntime") is not None:
        local = _measured(command, {"CTXADMIN_EMBEDDER": "local"})
        print(json.dumps(local), flush=True)
    section = report(results, command, local)
    REPORT.write_text(splice(REPORT.read_text(), section, SECTION))
    print(section, flush=True)
    return results


if __name__ == "__main__":
    run_section("python -m bench.evidence_bench")
