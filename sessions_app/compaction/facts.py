"""Which statements of a conversation carry facts, and what keeping each one is worth (pure;
deterministic, no model).

A statement's facts are counted from its surface: numbers (amounts, dates, times), day and
month words, capitalised words inside a sentence (names, places, titles), and the words of
preferences, plans and decisions ("love", "favourite", "decided", "going to", "my"). Its
worth is its facts per byte it costs in a summary, so a short statement full of specifics
goes before a long one with few; a statement is kept whole (its exact text) up to
``FACT_CHARS``, because the one thing a later question needs is rarely its first words.
"""

from __future__ import annotations

import re

FACT_CHARS = 600  # a statement longer than this is kept as its leading words
ITEM_OVERHEAD = 64  # bytes an entry costs besides its text: the keys, one cited event id

_PATTERNS = (
    re.compile(r"\d+"),
    re.compile(
        r"\b(?:jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?"
        r"|sep(?:t(?:ember)?)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?|monday|tuesday"
        r"|wednesday|thursday|friday|saturday|sunday|yesterday|today|tomorrow|tonight"
        r"|weekend|(?:last|next) (?:week|month|year|night|summer|winter|spring|fall)|ago)\b",
        re.IGNORECASE,
    ),
    re.compile(r"(?<=[a-z0-9,;:] )[A-Z][a-z][\w'-]*"),
    re.compile(
        r"\b(?:love[sd]?|like[sd]?|favou?rite|prefer(?:s|red)?|hate[sd]?|enjoy(?:s|ed)?"
        r"|decided?|chose|choose|plan(?:s|ned|ning)?|going to|will|want(?:s|ed)? to|my|our)\b",
        re.IGNORECASE,
    ),
)


def fact_count(text: str) -> int:
    """How many fact markers ``text`` holds."""
    return sum(len(pattern.findall(text)) for pattern in _PATTERNS)


def worth(text: str) -> float:
    """What keeping ``text`` in a summary is worth per byte it costs (higher keeps first)."""
    return (1 + fact_count(text)) / (len(text.encode("utf-8")) + ITEM_OVERHEAD)


def statement(text: str) -> str:
    """The part of ``text`` a summary keeps: all of it, or its leading words when it is
    longer than ``FACT_CHARS`` (a prefix either way, so an exact excerpt)."""
    text = text.strip()
    if len(text) <= FACT_CHARS:
        return text
    cut = text[:FACT_CHARS]
    space = cut.rfind(" ")
    return cut[:space] if space > FACT_CHARS // 2 else cut
