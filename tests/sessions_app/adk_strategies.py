"""Hypothesis strategies for ADK ``Event``s, built from ADK's own pydantic models.

Every field of every model is generated from its annotation (free generation), except the
fields ctxadmin interprets, which get valid values: ids, function calls with an id and a
name, inline data with a MIME type, state deltas without scope prefixes, and so on. Free
values stay within what the API's strict JSON accepts (no NUL, 64-bit integers, finite
numbers) and what JSON can carry back unchanged (floats within ±1e9).
"""

from __future__ import annotations

import enum
import types
import typing
from typing import Any

import pydantic
from fastapi.openapi.models import APIKey
from google.adk.auth.auth_credential import AuthCredential, AuthCredentialTypes
from google.adk.auth.auth_tool import AuthConfig
from google.adk.events import Event
from google.adk.events.event_actions import EventActions, EventCompaction
from google.adk.models.cache_metadata import CacheMetadata
from google.genai import types as genai
from hypothesis import strategies as st

TEXT = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=12
)
FLOATS = st.floats(-1e9, 1e9, allow_nan=False, allow_infinity=False)
INTS = st.integers(-(2**31), 2**31)
IDS = st.from_regex(r"\A[A-Za-z0-9][A-Za-z0-9._:@-]{0,20}\Z")
NAMES = st.from_regex(r"\A[A-Za-z_][A-Za-z0-9_.:-]{0,20}\Z")
MIME = st.sampled_from(["image/png", "text/plain", "audio/wav", "application/pdf"])
JSON = st.recursive(
    st.none() | st.booleans() | INTS | FLOATS | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=6,
)
JSON_OBJECT = st.dictionaries(TEXT, JSON, max_size=3)
MAX_DEPTH = 5
TIMES = st.integers(0, 4_000_000_000_000_000).map(lambda micros: micros / 1_000_000)


def _optional(annotation) -> tuple[Any, bool]:
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        optional = len(args) < len(typing.get_args(annotation))
        if len(args) == 1:
            return args[0], optional
        return typing.Union[tuple(args)], optional  # noqa: UP007 - built from a tuple
    return annotation, False


def value_of(annotation, depth: int) -> st.SearchStrategy:
    """A value for ``annotation``, as ADK's own model would hold it."""
    annotation, _optional_flag = _optional(annotation)
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if annotation is Any or annotation is object:
        return JSON
    if isinstance(annotation, type) and issubclass(annotation, pydantic.BaseModel):
        return free_model(annotation, depth + 1)
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return st.sampled_from(list(annotation))
    if annotation is bool:
        return st.booleans()
    if annotation is int:
        return INTS
    if annotation is float:
        return FLOATS
    if annotation is str:
        return TEXT
    if annotation is bytes:
        return st.binary(max_size=12)
    if origin is typing.Literal:
        return st.sampled_from(args)
    if origin in (typing.Union, types.UnionType):
        return st.one_of([value_of(arg, depth) for arg in args])
    if origin in (list, set):
        item = value_of(args[0], depth + 1) if depth < MAX_DEPTH else st.nothing()
        maker = st.lists if origin is list else st.sets
        return maker(item, max_size=2)
    if origin is dict:
        item = value_of(args[1], depth + 1) if depth < MAX_DEPTH else st.nothing()
        return st.dictionaries(TEXT, item, max_size=2)
    raise TypeError(f"no strategy for {annotation!r}")


def free_model(model: type[pydantic.BaseModel], depth: int = 0, **fixed) -> st.SearchStrategy:
    """``model`` with every field free (optional ones sometimes absent), but ``fixed``."""
    fields = {}
    for name, field in model.model_fields.items():
        if name in fixed:
            fields[name] = fixed[name]
            continue
        _inner, optional = _optional(field.annotation)
        optional = optional or not field.is_required()
        if depth >= MAX_DEPTH and optional:
            continue
        value = value_of(field.annotation, depth)
        fields[name] = st.none() | value if optional else value
    return st.fixed_dictionaries(fields).map(
        lambda values: model(**{k: v for k, v in values.items() if v is not None})
    )


def build(model, **fields: st.SearchStrategy) -> st.SearchStrategy:
    """``model(**fields)`` by field name (``st.builds`` reads a pydantic model's aliases)."""
    return st.fixed_dictionaries(fields).map(
        lambda values: model(**{k: v for k, v in values.items() if v is not None})
    )


_NO_KIND = {kind: st.none() for kind in ("text", "function_call", "function_response")}
_NO_KIND |= {"inline_data": st.none(), "file_data": st.none()}


def _part_with(kind: str | None, value: st.SearchStrategy | None) -> st.SearchStrategy:
    fixed = dict(_NO_KIND)
    if kind is not None:
        fixed[kind] = value
    return free_model(genai.Part, 1, **fixed)


PARTS = st.one_of(
    _part_with(None, None),
    _part_with("text", TEXT),
    _part_with(
        "function_call",
        free_model(genai.FunctionCall, 2, id=IDS, name=NAMES, args=st.none() | JSON_OBJECT),
    ),
    _part_with(
        "function_response",
        free_model(genai.FunctionResponse, 2, id=IDS, name=NAMES, response=st.none() | JSON_OBJECT),
    ),
    _part_with(
        "inline_data", free_model(genai.Blob, 2, data=st.binary(max_size=24), mime_type=MIME)
    ),
    _part_with("file_data", free_model(genai.FileData, 2, file_uri=TEXT, mime_type=MIME)),
)
CONTENTS = build(
    genai.Content,
    role=st.none() | st.sampled_from(["user", "model", "tool_agent"]),
    parts=st.none() | st.lists(PARTS, max_size=3),
)
STATE_KEYS = st.from_regex(r"\A(app:|user:)?[a-z_]{1,12}\Z")
# ADK parses every requested auth config as an AuthConfig (an OpenAPI security scheme and
# credentials, which hold the secrets the context builder prunes).
AUTH_CONFIGS = st.dictionaries(
    IDS,
    build(
        AuthConfig,
        auth_scheme=build(APIKey, **{"in": st.just("header"), "name": NAMES}),
        raw_auth_credential=st.none()
        | build(AuthCredential, auth_type=st.just(AuthCredentialTypes.API_KEY), api_key=TEXT),
        credential_key=st.none() | TEXT,
    ),
    max_size=2,
)
# A cache's name, expiry and use count come together or not at all.
CACHE = build(
    CacheMetadata,
    fingerprint=TEXT,
    contents_count=st.integers(0, 1000),
    created_at=st.none() | TIMES,
) | build(
    CacheMetadata,
    fingerprint=TEXT,
    contents_count=st.integers(0, 1000),
    cache_name=TEXT,
    expire_time=TIMES,
    invocations_used=st.integers(0, 1000),
)
ACTIONS = free_model(
    EventActions,
    1,
    state_delta=st.dictionaries(STATE_KEYS, JSON, max_size=3),
    artifact_delta=st.dictionaries(TEXT, st.integers(0, 1000), max_size=2),
    compaction=st.none()
    | build(
        EventCompaction, start_timestamp=TIMES, end_timestamp=TIMES, compacted_content=CONTENTS
    ),
    rewind_before_invocation_id=st.none() | IDS,
    requested_auth_configs=AUTH_CONFIGS,
)
COUNTS = st.none() | st.integers(0, 2**40)
USAGE = free_model(
    genai.GenerateContentResponseUsageMetadata,
    1,
    prompt_token_count=COUNTS,
    candidates_token_count=COUNTS,
    total_token_count=COUNTS,
    cached_content_token_count=COUNTS,
    thoughts_token_count=COUNTS,
    tool_use_prompt_token_count=COUNTS,
)
EVENTS = free_model(
    Event,
    0,
    id=IDS,
    invocation_id=st.just("") | IDS,
    author=st.from_regex(r"\A[A-Za-z][A-Za-z0-9_ -]{0,30}\Z"),
    content=st.none() | CONTENTS,
    partial=st.just(False),  # partial events are returned, never stored
    turn_complete=st.none() | st.booleans(),
    actions=ACTIONS,
    timestamp=TIMES,
    usage_metadata=st.none() | USAGE,
    custom_metadata=st.none() | JSON_OBJECT,
    cache_metadata=st.none() | CACHE,
)
