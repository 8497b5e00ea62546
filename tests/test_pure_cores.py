"""Properties of the pure cores: selection, canonical hashing, secret pruning."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from ctxadmin.canonical import canonical_json, fingerprint
from ctxadmin.pruning import SECRET_NAMES, has_secret_keys, is_secret_key, prune_secrets
from sessions_app.context.policy import ContextPolicy, IncludeExclude
from sessions_app.context.select import EventMeta, Overflow, build_units, select_history
from sessions_app.events import FUNCTION_CALL, FUNCTION_RESPONSE, MODEL_CONTENT, TEXT

BASE = datetime(2026, 1, 1, tzinfo=UTC).timestamp()


@st.composite
def histories(draw):
    """A chronological event list: text events and tool units, some interleaved, some
    responses missing (an open call), some events without content."""
    metas: list[EventMeta] = []
    open_calls: list[str] = []
    counter = 0
    for _ in range(draw(st.integers(0, 40))):
        counter += 1
        choice = draw(st.sampled_from(["text", "text", "call", "respond", "empty"]))
        author = draw(st.sampled_from(["user", "agent", "tool"]))
        size = draw(st.integers(10, 400))
        calls = responses = None
        kinds = TEXT | (MODEL_CONTENT if author == "agent" else 0)
        if choice == "call":
            ids = [f"c{counter}-{i}" for i in range(draw(st.integers(1, 2)))]
            open_calls.extend(ids)
            calls, kinds = ids, FUNCTION_CALL | MODEL_CONTENT
        elif choice == "respond" and open_calls:
            picked = draw(st.sampled_from(open_calls))
            open_calls.remove(picked)
            responses, kinds = [picked], FUNCTION_RESPONSE
        elif choice == "empty":
            kinds = 0
        metas.append(
            EventMeta(
                seq=counter,
                kinds=kinds,
                call_ids=calls,
                response_ids=responses,
                context_bytes=size,
                author=author,
                invocation_id=draw(st.sampled_from(["", "i1", "i2"])),
                timestamp=BASE + counter,
            )
        )
    return metas


@st.composite
def policies(draw):
    return ContextPolicy(
        authors=draw(
            st.sampled_from(
                [
                    IncludeExclude(),
                    IncludeExclude(exclude=frozenset({"tool"})),
                    IncludeExclude(include=frozenset({"user", "agent"})),
                ]
            )
        ),
        content_exclude_mask=draw(st.sampled_from([0, FUNCTION_RESPONSE, TEXT])),
        final_only=draw(st.booleans()),
        max_bytes=draw(st.one_of(st.none(), st.integers(1, 3000))),
        max_input_events=draw(st.one_of(st.none(), st.integers(1, 40))),
        overflow="truncate",
    )


def unit_of(units):
    owner = {}
    for number, (start, end) in enumerate(units):
        for index in range(start, end + 1):
            owner[index] = number
    return owner


@given(histories())
def test_units_cover_every_event_in_order_and_hold_calls_with_responses(metas):
    units = build_units(metas)
    covered = [i for start, end in units for i in range(start, end + 1)]
    assert covered == list(range(len(metas)))
    owner = unit_of(units)
    call_at = {cid: i for i, m in enumerate(metas) for cid in (m.call_ids or [])}
    for index, meta in enumerate(metas):
        for rid in meta.response_ids or []:
            assert owner[call_at[rid]] == owner[index]


@given(histories(), policies(), st.integers(0, 5000))
@settings(max_examples=300)
def test_truncate_never_splits_a_unit_never_exceeds_and_keeps_order(metas, policy, room):
    selection = select_history(metas, policy, request_room_bytes=room, framing_per_item=8)
    chosen = selection.indices
    assert chosen == sorted(chosen)  # output order = input order
    assert all(metas[i].kinds for i in chosen)  # only events with content
    used = sum(metas[i].context_bytes for i in chosen)
    assert used == selection.history_bytes
    if policy.max_bytes is not None:
        assert used <= policy.max_bytes
    assert used + 8 * len(chosen) <= room
    owner = unit_of(build_units(metas))
    kept_units = {owner[i] for i in chosen}
    for index, meta in enumerate(metas):
        if meta.kinds and owner[index] in kept_units:
            assert index in chosen  # a kept unit is kept whole
    assert selection.dropped + len(chosen) + selection.without_content == len(metas)
    again = select_history(metas, policy, request_room_bytes=room, framing_per_item=8)
    assert again == selection  # deterministic


@given(histories(), st.integers(1, 2000))
def test_error_mode_selects_everything_or_raises(metas, limit):
    policy = ContextPolicy(max_bytes=limit)
    total = sum(m.context_bytes for m in metas if m.kinds)
    try:
        selection = select_history(metas, policy, request_room_bytes=10**9, framing_per_item=8)
    except Overflow as overflow:
        assert total > limit
        assert overflow.measured_bytes == total and overflow.limit_bytes == limit
    else:
        assert selection.history_bytes == total <= limit


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=10),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.text(max_size=12)
            | st.sampled_from(sorted(SECRET_NAMES))
            | st.sampled_from(["API-Key", "clientSecret", "x_access_token"]),
            children,
            max_size=4,
        )
    ),
    max_leaves=30,
)


def shuffled(value, seed):
    if isinstance(value, dict):
        items = list(value.items())
        items = items[seed % len(items) :] + items[: seed % len(items)] if items else items
        return {k: shuffled(v, seed + 1) for k, v in items}
    if isinstance(value, list):
        return [shuffled(v, seed + 1) for v in value]
    return value


@given(json_values, st.integers(0, 100))
def test_fingerprint_ignores_key_order(value, seed):
    assert fingerprint(shuffled(value, seed)) == fingerprint(value)
    assert json.loads(canonical_json(value)) == value


@given(json_values)
def test_pruning_leaves_no_secret_named_key_at_any_depth(value):
    pruned = prune_secrets(value)
    assert not has_secret_keys(pruned)
    assert prune_secrets(pruned) == pruned


def test_secret_key_spellings():
    for name in [
        "api_key",
        "API-KEY",
        "apiKey",
        "openai_api_key",
        "Authorization",
        "client.secret",
        "refreshToken",
        "session_token",
        "PRIVATE_KEY",
        "Set-Cookie",
        "password",
        "x-api-key",
    ]:
        assert is_secret_key(name), name
    for name in ["query", "token_count", "author", "keys", "secretary_name", "passage"]:
        assert not is_secret_key(name), name


def test_pruning_handles_deep_nesting_without_recursion():
    deep: dict = {"leaf": 1, "password": "x"}
    for _ in range(5000):
        deep = {"next": deep}
    pruned = prune_secrets(deep)
    node = pruned
    for _ in range(5000):
        node = node["next"]
    assert node == {"leaf": 1}
