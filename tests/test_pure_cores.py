"""Properties of the pure cores: selection, the envelope, canonical hashing, secret pruning."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from ctxadmin.canonical import canonical_json, fingerprint
from ctxadmin.pruning import has_secret_keys, is_secret_key, prune_secrets
from sessions_app.context import envelope as env
from sessions_app.context.policy import ContextPolicy, IncludeExclude
from sessions_app.context.select import (
    EventMeta,
    Overflow,
    build_units,
    event_passes,
    select_history,
)
from sessions_app.events import FUNCTION_CALL, FUNCTION_RESPONSE, MODEL_CONTENT, TEXT

BASE = datetime(2026, 1, 1, tzinfo=UTC).timestamp()
FRAMING = env.FRAMING_PER_ITEM_BYTES


_STEPS = st.lists(
    st.tuples(
        st.sampled_from(["text", "text", "call", "respond", "empty", "checkpoint"]),
        st.sampled_from(["user", "agent", "tool"]),
        st.integers(10, 400),  # bytes
        st.sampled_from(["", "i1", "i2"]),
        st.integers(1, 2),  # calls in one event
        st.integers(0, 99),  # which open call a response answers
    ),
    min_size=1,
    max_size=40,
)


def _history(steps) -> list[EventMeta]:
    metas: list[EventMeta] = []
    open_calls: list[str] = []
    for seq, (choice, author, size, invocation, call_count, pick) in enumerate(steps, 1):
        calls = responses = None
        kinds = TEXT | (MODEL_CONTENT if author == "agent" else 0)
        if choice == "call":
            calls = [f"c{seq}-{i}" for i in range(call_count)]
            open_calls.extend(calls)
            kinds = FUNCTION_CALL | MODEL_CONTENT
        elif choice == "respond" and open_calls:
            responses, kinds = [open_calls.pop(pick % len(open_calls))], FUNCTION_RESPONSE
        elif choice == "empty":
            kinds = 0
        elif choice == "checkpoint":  # as the context builder reads one: no author, no ids
            metas.append(EventMeta(seq, TEXT | MODEL_CONTENT, None, None, size, checkpoint=True))
            continue
        metas.append(EventMeta(seq, kinds, calls, responses, size, author, invocation, BASE + seq))
    return metas


def histories():
    """A chronological event list: text events and tool units, some interleaved, some
    responses missing (an open call), some events without content, a few checkpoints."""
    return _STEPS.map(_history)


def _maybe(strategy):
    return st.one_of(st.none(), strategy)


def _mostly(neutral, *others):
    """Mostly ``neutral``: a policy sets a few filters, rarely all of them."""
    return st.sampled_from([neutral] * 12 + list(others))


_SECONDS = _mostly(None, *(BASE + s for s in range(0, 41, 5)))


def policies(overflows=("truncate",)):
    """Every filter and budget a policy can set (``parse_policy`` is tested separately)."""
    return st.builds(
        ContextPolicy,
        authors=_mostly(
            IncludeExclude(),
            IncludeExclude(exclude=frozenset({"tool"})),
            IncludeExclude(include=frozenset({"user", "agent"})),
        ),
        invocation_ids=_mostly(IncludeExclude(), IncludeExclude(include=frozenset({"i1"}))),
        content_include_mask=_mostly(None, TEXT, FUNCTION_CALL | TEXT),
        content_exclude_mask=_mostly(0, FUNCTION_RESPONSE, TEXT),
        timestamp_from=_SECONDS,
        timestamp_to=_SECONDS,
        final_only=_mostly(False, True),
        max_bytes=_maybe(st.integers(1, 3000)),
        max_tokens=_maybe(st.integers(1, 800)),
        max_request_bytes=_maybe(st.integers(100, 6000)),
        max_request_tokens=_maybe(st.integers(25, 1500)),
        bytes_per_token=st.integers(1, 8),
        max_input_events=_maybe(st.integers(1, 40)),
        overflow=st.sampled_from(overflows),
    )


ROOMS = st.integers(0, 6000) | st.integers(6000, 20000)  # bytes the fixed parts leave


def unit_of(units):
    owner = {}
    for number, (start, end) in enumerate(units):
        for index in range(start, end + 1):
            owner[index] = number
    return owner


def content_of(metas, unit):
    start, end = unit
    return [i for i in range(start, end + 1) if metas[i].kinds]


def eligible_units(metas, policy):
    """(units with content, the units of the input window, those whose every content event
    passes the filters): what the budgets choose from, oldest first."""
    window_start = len(metas) - policy.max_input_events if policy.max_input_events else 0
    with_content = [u for u in build_units(metas) if content_of(metas, u)]
    in_window = [u for u in with_content if min(content_of(metas, u)) >= window_start]
    passing = [
        u for u in in_window if all(event_passes(metas[i], policy) for i in content_of(metas, u))
    ]
    return with_content, in_window, passing


def fits(metas, units, policy, room):
    used = sum(metas[i].context_bytes for u in units for i in content_of(metas, u))
    items = sum(len(content_of(metas, u)) for u in units)
    return (
        (policy.max_bytes is None or used <= policy.max_bytes)
        and (policy.max_tokens is None or used <= policy.max_tokens * policy.bytes_per_token)
        and used + FRAMING * items <= room
    )


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


@given(histories(), policies(), ROOMS)
@settings(max_examples=300)
def test_truncate_keeps_the_newest_whole_units_that_fit_in_order(metas, policy, room):
    selection = select_history(metas, policy, request_room_bytes=room, framing_per_item=FRAMING)
    with_content, in_window, passing = eligible_units(metas, policy)
    units = build_units(metas)
    owner = unit_of(units)
    chosen = selection.indices
    kept = sorted({owner[i] for i in chosen})
    kept_units = [units[n] for n in kept]
    # Whole units, in input order, only events with content.
    assert chosen == [i for u in kept_units for i in content_of(metas, u)]
    # Inside the input window, through the filters, within every budget.
    assert kept_units == passing[len(passing) - len(kept_units) :]  # the newest ones
    assert fits(metas, kept_units, policy, room)
    assert selection.history_bytes == sum(metas[i].context_bytes for i in chosen)
    # Nothing that fits is left out: the next older unit would break a budget.
    assert selection.truncated == (len(kept_units) < len(passing))
    if selection.truncated:
        older = passing[len(passing) - len(kept_units) - 1]
        assert not fits(metas, [older, *kept_units], policy, room)
    # Every input event is accounted for, once.
    content_count = sum(1 for m in metas if m.kinds)
    assert selection.without_content == len(metas) - content_count
    assert selection.dropped_by_window == sum(
        len(content_of(metas, u)) for u in with_content if u not in in_window
    )
    assert selection.dropped_by_filter == sum(
        len(content_of(metas, u)) for u in in_window if u not in passing
    )
    assert selection.dropped + len(chosen) == content_count
    again = select_history(metas, policy, request_room_bytes=room, framing_per_item=FRAMING)
    assert again == selection  # deterministic


@given(histories(), policies(("error", "compress")), ROOMS)
@settings(max_examples=200)
def test_error_mode_selects_everything_eligible_or_names_the_budget(metas, policy, room):
    _with_content, _in_window, passing = eligible_units(metas, policy)
    everything = [i for u in passing for i in content_of(metas, u)]
    total = sum(metas[i].context_bytes for i in everything)
    token_bytes = None if policy.max_tokens is None else policy.max_tokens * policy.bytes_per_token
    limits = [limit for limit in (policy.max_bytes, token_bytes) if limit is not None]
    history_limit = min(limits) if limits else None
    try:
        selection = select_history(metas, policy, request_room_bytes=room, framing_per_item=FRAMING)
    except Overflow as overflow:
        if history_limit is not None and total > history_limit:
            assert (overflow.limit_name, overflow.measured_bytes) == ("history", total)
            assert overflow.limit_bytes == history_limit
        else:
            assert overflow.limit_name == "request" and overflow.limit_bytes == room
            assert overflow.measured_bytes == total + FRAMING * len(everything) > room
    else:
        assert selection.indices == everything and not selection.truncated
        assert fits(metas, passing, policy, room)


def history_item(meta: EventMeta) -> str:
    """Canonical JSON of exactly ``meta.context_bytes`` bytes, naming its event."""
    return f'[{meta.seq},"' + "x" * (meta.context_bytes - len(str(meta.seq)) - 5) + '"]'


# Glued credential names (every one is secret in every spelling: see SECRET_WORDS below).
GLUED_SECRET_NAMES = [
    *("apikey", "accesstoken", "refreshtoken", "idtoken", "authtoken", "bearertoken"),
    *("sessiontoken", "authorization", "clientsecret", "password", "passwd", "secret"),
    *("privatekey", "cookie"),
]
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=10),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.text(max_size=12)
            | st.sampled_from(GLUED_SECRET_NAMES)
            | st.sampled_from(["API-Key", "clientSecret", "x_access_token"]),
            children,
            max_size=4,
        )
    ),
    max_leaves=30,
)
# Small objects for the envelope's fixed parts, some naming a credential.
_flat_objects = st.dictionaries(
    st.sampled_from(["text", "note", "temperature", "password", "apiKey", "x-api-key"]),
    st.none() | st.integers() | st.text(max_size=12),
    max_size=3,
)
current_inputs = st.fixed_dictionaries(
    {"role": st.just("user"), "parts": st.lists(_flat_objects, max_size=3)},
    optional={"auth": _flat_objects},
)


@given(
    histories(),
    policies(),
    current_inputs,
    st.fixed_dictionaries(
        {
            "instructions": _maybe(st.text(max_size=60)),
            "generation_config": _maybe(_flat_objects),
            "tools": _maybe(st.lists(_flat_objects, max_size=2)),
            "memory": st.lists(_flat_objects, max_size=2),
        }
    ),
    st.integers(1024, 8000),
)
@settings(max_examples=150)
def test_the_envelope_holds_the_current_input_and_fits_the_request_budget(
    metas, policy, current_input, fixed, ceiling
):
    """``build_context`` minus the database: whatever the history and the budgets, the
    current input is sent (pruned) and the envelope's bytes stay within the request budget."""
    parts = env.fixed_parts(current_input=current_input, **fixed)
    sizes = env.fixed_sizes(parts)
    request_limit = policy.request_byte_limit(ceiling)
    room = request_limit - sum(sizes.values())
    if room < 0:  # refused before any history is read
        return
    selection = select_history(metas, policy, request_room_bytes=room, framing_per_item=FRAMING)
    history = [history_item(metas[i]) for i in selection.indices]
    envelope_json = env.assemble(parts, history)
    envelope = json.loads(envelope_json)
    assert envelope["current_input"] == prune_secrets(current_input)
    assert not has_secret_keys(envelope["current_input"])
    assert envelope["history"] == [json.loads(item) for item in history]
    assert envelope_json == canonical_json(envelope)  # spliced, yet canonical
    accounting = env.accounting(
        sizes, selection.history_bytes, len(history), policy.bytes_per_token
    )["bytes"]
    assert accounting["current_input"] == len(canonical_json(parts["current_input"]))
    assert len(envelope_json) <= accounting["total"] <= request_limit


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


# Each secret name as words, to spell it the ways clients do (apiKey, API-KEY, api_key, ...).
SECRET_WORDS = {
    "apikey": ("api", "key"),
    "accesstoken": ("access", "token"),
    "refreshtoken": ("refresh", "token"),
    "idtoken": ("id", "token"),
    "authtoken": ("auth", "token"),
    "bearertoken": ("bearer", "token"),
    "sessiontoken": ("session", "token"),
    "authorization": ("authorization",),
    "clientsecret": ("client", "secret"),
    "password": ("password",),
    "passwd": ("passwd",),
    "secret": ("secret",),
    "privatekey": ("private", "key"),
    "cookie": ("cookie",),
}
_STYLES = {
    "lower": lambda words: [w.lower() for w in words],
    "upper": lambda words: [w.upper() for w in words],
    "camel": lambda words: [words[0], *(w.capitalize() for w in words[1:])],
    "title": lambda words: [w.capitalize() for w in words],
}
_SEPARATORS = ("", "_", "-", ".", " ")
_PREFIXES = ("", "openai_", "x-", "Upstream.", "set-")
SECRET_SPELLINGS = sorted(
    prefix + separator.join(style(words))
    for words in SECRET_WORDS.values()
    for style in _STYLES.values()
    for separator in _SEPARATORS
    for prefix in _PREFIXES
)
_SPELLED = frozenset(SECRET_SPELLINGS)
plain_keys = st.text(max_size=12).filter(lambda key: not is_secret_key(key))
values_with_secrets = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(plain_keys | st.sampled_from(SECRET_SPELLINGS), children, max_size=4)
    ),
    max_leaves=30,
)


def without_spelled_secrets(value):
    if isinstance(value, dict):
        return {k: without_spelled_secrets(v) for k, v in value.items() if k not in _SPELLED}
    if isinstance(value, list):
        return [without_spelled_secrets(v) for v in value]
    return value


def test_every_secret_name_is_secret_in_every_spelling():
    assert set(SECRET_WORDS) == set(GLUED_SECRET_NAMES)
    assert all(is_secret_key(name) for name in SECRET_WORDS)
    assert all(is_secret_key(name) for name in SECRET_SPELLINGS)


@given(values_with_secrets)
def test_pruning_removes_every_spelling_of_a_secret_name_at_any_depth_and_nothing_else(value):
    pruned = prune_secrets(value)
    assert pruned == without_spelled_secrets(value)
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
