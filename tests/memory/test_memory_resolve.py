"""The memory slot's version resolution (pure): one version per key, the latest valid, at
the best rank; unkeyed hits about the same thing grouped, newest first."""

from __future__ import annotations

from memory import resolve


def hit(id_, content, key=None, valid_from="2026-01-01T00:00:00+00:00"):
    return {"id": id_, "content": content, "key": key, "valid_from": valid_from}


def test_one_version_per_key_the_latest_valid_at_the_best_rank():
    hits = [
        hit("a", "aisle seat", "preference.seat", "2026-01-01T00:00:00+00:00"),
        hit("x", "likes tea"),
        hit("w", "window seat", "preference.seat", "2026-06-01T00:00:00+00:00"),
    ]
    assert [h["id"] for h in resolve.one_per_key(hits)] == ["w", "x"]


def test_unkeyed_hits_about_the_same_thing_are_grouped_newest_first():
    hits = [
        hit("old", "Alice lives in Porto now", valid_from="2025-01-01T00:00:00+00:00"),
        hit("tea", "Alice likes green tea"),
        hit("new", "Alice lives in Lisbon now", valid_from="2026-03-01T00:00:00+00:00"),
    ]
    resolved = resolve.resolve(hits)
    assert [h["id"] for h in resolved] == ["new", "old", "tea"]
    assert [h.get("group") for h in resolved] == [1, 1, None]


def test_below_the_threshold_nothing_is_grouped():
    # {alice, lives, in, porto} and {alice, works, in, lisbon}: 2 of 6 words shared.
    hits = [hit("p", "Alice lives in Porto"), hit("l", "Alice works in Lisbon")]
    assert (
        resolve.jaccard(resolve.words(hits[0]["content"]), resolve.words(hits[1]["content"]))
        < resolve.SAME_THING_JACCARD
    )
    assert [h.get("group") for h in resolve.resolve(hits)] == [None, None]


def test_keyed_hits_are_never_grouped_with_unkeyed_ones():
    hits = [hit("k", "Alice lives in Lisbon", "home.city"), hit("u", "Alice lives in Lisbon!")]
    assert [(h["id"], h.get("group")) for h in resolve.resolve(hits)] == [
        ("k", None),
        ("u", None),
    ]


def test_texts_of_fewer_than_four_words_are_never_grouped():
    hits = [hit("a", "Yes, I did!"), hit("b", "Yes I did")]
    assert [h.get("group") for h in resolve.resolve(hits)] == [None, None]
