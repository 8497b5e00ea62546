"""Properties of canonical JSON and its fingerprint (pure)."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from ctxadmin.canonical import canonical_json, fingerprint
from tests.context_strategies import (
    json_values,
)


def shuffled(value, rng):
    """The same logical value with every object's keys in another order."""
    if isinstance(value, dict):
        items = list(value.items())
        rng.shuffle(items)
        return {k: shuffled(v, rng) for k, v in items}
    if isinstance(value, list):
        return [shuffled(v, rng) for v in value]
    return value


@given(json_values, st.randoms(use_true_random=False))
def test_fingerprint_ignores_key_order(value, rng):
    reordered = shuffled(value, rng)
    assert reordered == value
    assert canonical_json(reordered) == canonical_json(value)
    assert fingerprint(reordered) == fingerprint(value)
    assert json.loads(canonical_json(value)) == value
