"""When two memories say the same thing: the normalised text that makes two adds one memory,
and the word overlap above which two memories are near-duplicates.

Pure: no Django, no database.

- **Exact**: two texts are the same memory when their ``normalised`` forms are equal:
  Unicode NFKC, case-folded, every run of whitespace one space, the ends stripped of
  whitespace and of the punctuation a sentence ends with. "Alice prefers window seats." and
  "alice  prefers window seats" are one memory; "Alice prefers aisle seats" is another.
- **Near**: two texts are near-duplicates when the Jaccard overlap of their word sets
  (``words``: the normalised text's runs of letters and digits) is at least
  ``NEAR_DUPLICATE_JACCARD`` and they hold the same numbers (``numbers``: the words with a
  digit): "we took tram 12" and "we took tram 28" differ in the one word that is the fact,
  so they are never near-duplicates however alike the rest. Texts of fewer than
  ``MIN_NEAR_WORDS`` words are never near anything (on three words, one word decides).
  The threshold is calibrated in ``bench/duplicates_bench.py`` on LoCoMo: the share of
  distinct utterances it would merge beside the share of reworded copies it catches.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata

# What a sentence ends with, stripped from both ends of a normalised text.
_ENDS = " \t\n\r\f\v.!?;:,\u2026\u3002\uff01\uff1f\u3001"
_SPACE = re.compile(r"\s+")
_WORD = re.compile(r"\w+")

NEAR_DUPLICATE_JACCARD = 0.8
MIN_NEAR_WORDS = 4


def normalised(text: str) -> str:
    """The form two texts share when they are the same memory."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    return _SPACE.sub(" ", folded).strip(_ENDS)


def normalised_sha256(text: str) -> str:
    """The hex SHA-256 of ``normalised(text)`` (what the database compares)."""
    return hashlib.sha256(normalised(text).encode("utf-8")).hexdigest()


def words(text: str) -> frozenset[str]:
    """The distinct words of the normalised text."""
    return frozenset(_WORD.findall(normalised(text)))


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    """The size of the intersection over the size of the union (0 for two empty sets)."""
    union = len(a | b)
    return len(a & b) / union if union else 0.0


def numbers(word_set: frozenset[str]) -> frozenset[str]:
    """The words of ``word_set`` that hold a digit."""
    return frozenset(word for word in word_set if any(c.isdigit() for c in word))


def near_words(
    first: frozenset[str], second: frozenset[str], threshold: float = NEAR_DUPLICATE_JACCARD
) -> bool:
    """Whether two word sets are near-duplicates (see the module's rule)."""
    if min(len(first), len(second)) < MIN_NEAR_WORDS:
        return False
    return numbers(first) == numbers(second) and jaccard(first, second) >= threshold


def near_duplicates(a: str, b: str, threshold: float = NEAR_DUPLICATE_JACCARD) -> bool:
    """Whether ``a`` and ``b`` are near-duplicates (see the module's rule)."""
    return near_words(words(a), words(b), threshold)
