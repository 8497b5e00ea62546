"""Recall from a session's own compacted history (pure; no Django import).

When the selected history holds a checkpoint whose summarised events are still stored
(``audit`` retention), the events it hides are scored against the current input (BM25 over
lowercased words, English stop words out), and the best that fit what the budget leaves are
restored as exact excerpts: one ``user`` item, right after the checkpoint's summary, each
excerpt citing its event id, author and time. An excerpt whose text the selected history or
the memory slot already holds is not sent twice. An event whose text looks like it carries a
credential (``ctxadmin.credentials``) is never restored: the summary redacted it or left the
request out, and an exact excerpt cannot be redacted and still be exact.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from datetime import UTC, datetime
from typing import NamedTuple

from ctxadmin.canonical import canonical_json, canonical_size
from ctxadmin.credentials import looks_like_secret

# The newest hidden events a build reads (one query); older ones are not searched.
MAX_CANDIDATES = 5_000
# At most this many excerpts in one build.
MAX_EXCERPTS = 40
PREAMBLE = (
    "Exact excerpts restored from earlier in this session (summarised above); "
    "each cites its event id, author and time:"
)
_K1, _B = 1.2, 0.75
_WORD = re.compile(r"\w+")
_STOP = frozenset(
    """a about above after again against all am an and any are as at be because been before
    being below between both but by can could did do does doing down during each few for from
    further had has have having he her here hers herself him himself his how i if in into is it
    its itself just me more most my myself no nor not now of off on once only or other our ours
    ourselves out over own same she should so some such than that the their theirs them
    themselves then there these they this those through to too under until up very was we were
    what when where which while who whom why will with would you your yours yourself
    yourselves""".split()
)


class Hidden(NamedTuple):
    """A stored event a checkpoint hides: its id, author, time and text."""

    seq: int
    event_id: str
    author: str
    timestamp: float  # seconds since the epoch
    text: str


def words(text: str) -> list[str]:
    return [w for w in _WORD.findall(text.lower()) if w not in _STOP]


def rank(query: str, events: list[Hidden]) -> list[Hidden]:
    """The events that share a word with ``query``, best BM25 score first."""
    terms = set(words(query))
    if not terms or not events:
        return []
    counts = [Counter(words(event.text)) for event in events]
    lengths = [sum(c.values()) for c in counts]
    average = (sum(lengths) / len(lengths)) or 1.0
    frequency = {t: sum(1 for c in counts if t in c) for t in terms}
    total = len(events)
    idf = {t: math.log(1 + (total - n + 0.5) / (n + 0.5)) for t, n in frequency.items() if n}
    scored = []
    for index, (count, length) in enumerate(zip(counts, lengths, strict=True)):
        norm = _K1 * (1 - _B + _B * length / average)
        score = sum(
            weight * count[t] * (_K1 + 1) / (count[t] + norm)
            for t, weight in idf.items()
            if t in count
        )
        if score > 0:
            scored.append((-score, -events[index].seq, index))
    scored.sort()
    return [events[index] for _s, _q, index in scored]


def _line(event: Hidden) -> str:
    when = datetime.fromtimestamp(event.timestamp, UTC).isoformat(timespec="seconds")
    return f"\n[event {event.event_id} by {event.author} at {when}]\n{event.text}"


def _item(chosen: list[Hidden]) -> dict:
    ordered = sorted(chosen, key=lambda event: event.seq)
    return {
        "author": "ctxadmin.recall",
        "recalled_event_ids": [event.event_id for event in ordered],
        "content": {
            "role": "user",
            "parts": [{"text": PREAMBLE + "".join(_line(event) for event in ordered)}],
        },
    }


def _held(text: str, held_json: str, held_text: str) -> bool:
    return text in held_text or canonical_json(text).decode("utf-8")[1:-1] in held_json


def restore(
    ranked: list[Hidden], room_bytes: int, held_json: str, held_text: str = ""
) -> tuple[str | None, int]:
    """The excerpts item (canonical JSON) of the best ``ranked`` events that fit in
    ``room_bytes``, skipping any whose text ``held_json`` (canonical JSON of the selected
    history and memory slot) or ``held_text`` (plain text) holds, or that looks like it
    carries a credential; and its size. ``None, 0`` when nothing fits."""
    chosen: list[Hidden] = []
    texts: set[str] = set()
    used = canonical_size(_item([]))
    if used >= room_bytes:
        return None, 0
    for event in ranked:
        if len(chosen) >= MAX_EXCERPTS:
            break
        if not event.text.strip() or event.text in texts or _held(event.text, held_json, held_text):
            continue
        if looks_like_secret(event.text):
            continue
        size = len(canonical_json(_line(event))) - 2 + len(canonical_json(event.event_id)) + 1
        if used + size > room_bytes:
            continue
        chosen.append(event)
        texts.add(event.text)
        used += size
    if not chosen:
        return None, 0
    item = canonical_json(_item(chosen)).decode("utf-8")
    # The estimate above is exact for canonical JSON; guard anyway.
    while len(item.encode("utf-8")) > room_bytes and chosen:
        chosen.pop()
        item = canonical_json(_item(chosen)).decode("utf-8")
    if not chosen:
        return None, 0
    return item, len(item.encode("utf-8"))
