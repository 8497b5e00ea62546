"""Versions resolved for the context builder's memory slot (pure; no Django import).

- **One version per key.** Of the hits that share a key, only the latest valid (the
  greatest ``valid_from``, then ``recorded_at``) is kept, in the place of the best ranked
  of them: should two versions of a key both match a reader (one closed after its
  ``known_at`` reads as open), the slot still states one value per fact.
- **Contradictions without a key.** Unkeyed hits about the same thing (the Jaccard overlap
  of their word sets, ``memory.similarity.words``, at least ``SAME_THING_JACCARD``; texts
  of fewer than ``MIN_NEAR_WORDS`` words are about nothing in particular) form a group:
  shown together, newest first (by ``valid_from``), in the place of the group's best ranked
  hit, each with its date; a group of two or more carries its number (``group``).
"""

from __future__ import annotations

from memory.similarity import MIN_NEAR_WORDS, jaccard, words

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


def group_same_things(hits: list[dict]) -> list[dict]:
    """``hits`` (best first) with the unkeyed hits about the same thing together, newest
    first, where the best of them ranked; each of a group of two or more gets ``group``
    (1, 2, … in the order the groups are placed). A hit joins the first group holding a
    hit it overlaps enough."""
    groups: list[list[dict]] = []
    word_sets: list[list[frozenset[str]]] = []
    order: list[tuple[str, int]] = []  # ("hit", index) or ("group", index)
    singles: list[dict] = []
    for hit in hits:
        if hit.get("key") is not None:
            order.append(("hit", len(singles)))
            singles.append(hit)
            continue
        mine = words(hit["content"])
        for index, members in enumerate(word_sets):
            if len(mine) >= MIN_NEAR_WORDS and any(
                jaccard(mine, other) >= SAME_THING_JACCARD for other in members
            ):
                groups[index].append(hit)
                members.append(mine)
                break
        else:
            order.append(("group", len(groups)))
            groups.append([hit])
            word_sets.append([mine] if len(mine) >= MIN_NEAR_WORDS else [])
    resolved: list[dict] = []
    number = 0
    for kind, index in order:
        if kind == "hit":
            resolved.append(singles[index])
            continue
        members = groups[index]
        if len(members) == 1:
            resolved.append(members[0])
            continue
        number += 1
        ordered = sorted(members, key=_newer, reverse=True)
        resolved.extend({**member, "group": number} for member in ordered)
    return resolved


def resolve(hits: list[dict]) -> list[dict]:
    """The slot's hits: one version per key, unkeyed contradictions grouped."""
    return group_same_things(one_per_key(hits))
