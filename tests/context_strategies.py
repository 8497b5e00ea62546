"""Hypothesis strategies of the pure cores' tests: histories of event metadata, context
policies, room left, and JSON values with glued credential names."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import strategies as st

from sessions_app.context import envelope as env
from sessions_app.context.policy import ContextPolicy, IncludeExclude
from sessions_app.context.select import (
    EventMeta,
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


def maybe(strategy):
    return st.one_of(st.none(), strategy)


def _mostly(neutral, *others):
    """Mostly ``neutral``: a policy sets a few filters, rarely all of them."""
    return st.sampled_from([neutral] * 12 + list(others))


_SECONDS = _mostly(None, *(BASE + s for s in range(0, 41, 5)))


def policies(overflows=("truncate",)):
    """Every filter and budget a policy can set (``parse_context_policy`` is tested separately)."""
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
        max_bytes=maybe(st.integers(1, 3000)),
        max_tokens=maybe(st.integers(1, 800)),
        max_request_bytes=maybe(st.integers(100, 6000)),
        max_request_tokens=maybe(st.integers(25, 1500)),
        bytes_per_token=st.integers(1, 8),
        max_input_events=maybe(st.integers(1, 40)),
        overflow=st.sampled_from(overflows),
    )


ROOMS = st.integers(0, 6000) | st.integers(6000, 20000)  # bytes the fixed parts leave


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
flat_objects = st.dictionaries(
    st.sampled_from(["text", "note", "temperature", "password", "apiKey", "x-api-key"]),
    st.none() | st.integers() | st.text(max_size=12),
    max_size=3,
)


current_inputs = st.fixed_dictionaries(
    {"role": st.just("user"), "parts": st.lists(flat_objects, max_size=3)},
    optional={"auth": flat_objects},
)
