"""Versions resolved for the context builder's memory slot (pure; no Django import).

- **One version per key.** Of the hits that share a key, only the latest valid (the
  greatest ``valid_from``, then ``recorded_at``) is kept, in the place of the best ranked
  of them: should two versions of a key both match a reader (one closed after its
  ``known_at`` reads as open), the slot still states one value per fact.
- **Contradictions without a key.** Unkeyed hits about the same thing (the Jaccard overlap
  of their word sets, ``memory.similarity.words``, at least ``SAME_THING_JACCARD``; texts
  of fewer than ``MIN_NEAR_WORDS`` words are about nothing in particular) form a group,
  shown newest first (by ``valid_from``) in the places the search ranked its members, each
  with its date and the group's number (``group``): the newest takes the group's best
  rank, and every other hit keeps its own. (Moving a group's members up beside its best
  hit packed low-ranked hits in place of better ones: the evidence benchmark lost up to
  0.008 of coverage.)
"""

from __future__ import annotations

import math

from memory.similarity import MIN_NEAR_WORDS, words

SAME_THING_JACCARD = 0.5


def _newer(hit: dict) -> tuple[str, str]:
    return (hit.get("valid_from") or "", hit.get("recorded_at") or "")


def one_per_key(hits: list[dict]) -> list[dict]:
    """``hits`` (best first) with one hit per key: the latest valid, at the best rank."""
    latest: dict[str, dict] = {}
    for hit in hits:
        key = hit.get("key")
        if key is not None and (key not in latest or _newer(hit) > _newer(latest[key])):
            latest[key] = hit
    resolved, placed = [], set()
    for hit in hits:
        key = hit.get("key")
        if key is None:
            resolved.append(hit)
        elif key not in placed:
            placed.add(key)
            resolved.append(latest[key])
    return resolved


def _overlapping(word_sets: list[frozenset[str]]) -> list[list[int]]:
    """For each word set, the earlier sets it overlaps by at least ``SAME_THING_JACCARD``
    (none for a set of fewer than ``MIN_NEAR_WORDS`` words, nor with one).

    Prefix filtering keeps this near linear: with the words of every set ordered rarest
    first, two sets whose overlap reaches the threshold share a word within the first
    ``n - ceil(t * n) + 1`` words of each, so only sets meeting in those prefixes are
    compared, and only when their sizes allow the threshold (``t * |a| <= |b|``)."""
    frequency: dict[str, int] = {}
    for word_set in word_sets:
        for word in word_set:
            frequency[word] = frequency.get(word, 0) + 1
    postings: dict[str, list[int]] = {}
    overlapping: list[list[int]] = []
    for index, mine in enumerate(word_sets):
        size = len(mine)
        found: list[int] = []
        overlapping.append(found)
        if size < MIN_NEAR_WORDS:
            continue
        ordered = sorted(mine, key=lambda word: (frequency[word], word))
        prefix = ordered[: size - max(1, math.ceil(SAME_THING_JACCARD * size - 1e-9)) + 1]
        candidates = {other for word in prefix for other in postings.get(word, ())}
        for other in candidates:
            theirs = word_sets[other]
            if SAME_THING_JACCARD * max(size, len(theirs)) > min(size, len(theirs)):
                continue
            shared = len(mine & theirs)  # the Jaccard overlap: shared / (|a| + |b| - shared)
            if shared >= SAME_THING_JACCARD * (size + len(theirs) - shared):
                found.append(other)
        for word in prefix:
            postings.setdefault(word, []).append(index)
    return overlapping


def group_same_things(hits: list[dict]) -> list[dict]:
    """``hits`` (best first) with the unkeyed hits about the same thing shown newest first in
    the places the search ranked them: a group's members trade places among the ranks they
    hold, so the newest takes the group's best rank, and every other hit keeps its own (what
    the slot packs, and which hits get their neighbours, is what the search ranked). Each
    member of a group of two or more gets ``group`` (1, 2, … by the group's best rank). A hit
    joins the first group holding a hit it overlaps enough."""
    unkeyed = [hit for hit in hits if hit.get("key") is None]
    overlapping = _overlapping([words(hit["content"]) for hit in unkeyed])
    group_of: list[int] = []
    groups: list[list[dict]] = []
    for hit, others in zip(unkeyed, overlapping, strict=True):
        if others:
            joined = min(group_of[other] for other in others)
            group_of.append(joined)
            groups[joined].append(hit)
        else:
            group_of.append(len(groups))
            groups.append([hit])
    newest_first = [sorted(members, key=_newer, reverse=True) for members in groups]
    numbers: dict[int, int] = {}
    resolved: list[dict] = []
    position = 0
    for hit in hits:
        if hit.get("key") is not None:
            resolved.append(hit)
            continue
        group = group_of[position]
        position += 1
        if len(groups[group]) == 1:
            resolved.append(hit)
            continue
        number = numbers.setdefault(group, len(numbers) + 1)
        resolved.append({**newest_first[group].pop(0), "group": number})
    return resolved


def resolve(hits: list[dict]) -> list[dict]:
    """The slot's hits: one version per key, unkeyed contradictions grouped."""
    return group_same_things(one_per_key(hits))
