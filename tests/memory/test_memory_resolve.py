"""The memory slot's version resolution (pure): one version per key, the latest valid, at
the best rank; unkeyed hits about the same thing grouped, newest first."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from memory import resolve
from memory.similarity import MIN_NEAR_WORDS, jaccard, words


def hit(id_, content, key=None, valid_from="2026-01-01T00:00:00+00:00"):
    return {"id": id_, "content": content, "key": key, "valid_from": valid_from}


def test_one_version_per_key_the_latest_valid_at_the_best_rank():
    hits = [
        hit("a", "aisle seat", "preference.seat", "2026-01-01T00:00:00+00:00"),
        hit("x", "likes tea"),
        hit("w", "window seat", "preference.seat", "2026-06-01T00:00:00+00:00"),
    ]
    assert [h["id"] for h in resolve.one_per_key(hits)] == ["w", "x"]


def test_unkeyed_hits_about_the_same_thing_trade_places_newest_first():
    hits = [
        hit("old", "Alice lives in Porto now", valid_from="2025-01-01T00:00:00+00:00"),
        hit("tea", "Alice likes green tea"),
        hit("new", "Alice lives in Lisbon now", valid_from="2026-03-01T00:00:00+00:00"),
        hit("mid", "Alice lives in Braga now", valid_from="2025-06-01T00:00:00+00:00"),
        hit("k", "Window seat", "preference.seat"),
    ]
    resolved = resolve.resolve(hits)
    # The group holds ranks 1, 3 and 4: the newest takes rank 1; tea and the key keep theirs.
    assert [h["id"] for h in resolved] == ["new", "tea", "mid", "old", "k"]
    assert [h.get("group") for h in resolved] == [1, None, 1, 1, None]


def test_below_the_threshold_nothing_is_grouped():
    # {alice, lives, in, porto} and {alice, works, in, lisbon}: 2 of 6 words shared.
    hits = [hit("p", "Alice lives in Porto"), hit("l", "Alice works in Lisbon")]
    assert (
        jaccard(words(hits[0]["content"]), words(hits[1]["content"])) < resolve.SAME_THING_JACCARD
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


def _grouped_pairwise(hits):
    """The grouping rule stated plainly: a hit joins the first group holding a hit it
    overlaps enough, comparing it with every member of every earlier group."""
    groups = []
    for hit_ in hits:
        mine = words(hit_["content"])
        for members in groups:
            if len(mine) >= MIN_NEAR_WORDS and any(
                len(words(m["content"])) >= MIN_NEAR_WORDS
                and jaccard(mine, words(m["content"])) >= resolve.SAME_THING_JACCARD
                for m in members
            ):
                members.append(hit_)
                break
        else:
            groups.append([hit_])
    return sorted(sorted(h["id"] for h in members) for members in groups)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.lists(st.sampled_from("abcdefghij"), min_size=1, max_size=9),
        min_size=1,
        max_size=30,
    )
)
def test_the_filtered_grouping_is_the_pairwise_rule(texts):
    # Words from a small alphabet so that overlaps, near misses and chains (a hit that
    # overlaps members of two groups) are common.
    hits = [hit(str(i), " ".join(text)) for i, text in enumerate(texts)]
    resolved = resolve.group_same_things(hits)
    found: dict[object, list[str]] = {}
    for position, h in enumerate(resolved):
        found.setdefault(h.get("group", ("single", position)), []).append(h["id"])
    assert sorted(sorted(ids) for ids in found.values()) == _grouped_pairwise(hits)
    assert sorted(h["id"] for h in resolved) == sorted(h["id"] for h in hits)
