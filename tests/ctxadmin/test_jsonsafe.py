"""The strict JSON decoder (pure): what it refuses, and where it says the problem is."""

from __future__ import annotations

import json

import pytest

from ctxadmin.api.jsonsafe import JsonInputError, loads_strict


def refused(raw: bytes, **kwargs) -> JsonInputError:
    with pytest.raises(JsonInputError) as caught:
        loads_strict(raw, 32, **kwargs)
    return caught.value


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        (rb'"\ud800"', "body"),
        (rb'{"a": "x\udfff"}', "a"),
        (rb'{"a": [1, {"b": "\udbff"}]}', "a[1].b"),
        (rb'[{"k": ["ok", "\ud800\ud800"]}]', "[0].k[1]"),
        (rb'{"m": {"\ud800": 1}}', "m.\\ud800"),
        (rb'{"\udc00x": null}', "\\udc00x"),
        # A high surrogate followed by a non-low one stays two characters, the first lone.
        (rb'{"a": "\ud800\u0041"}', "a"),
        (rb'{"upper": "\uDFFF"}', "upper"),
    ],
)
def test_a_lone_surrogate_is_refused_where_it_is(raw, field):
    error = refused(raw)
    assert error.code == "invalid_characters"
    assert error.details == {"field": field}
    assert "lone surrogate" in error.message and field in error.message
    # The message itself is valid UTF-8: it can be written in an answer.
    error.message.encode("utf-8")


def test_a_pair_of_surrogates_is_one_character_and_accepted():
    assert loads_strict(rb'{"\ud83d\ude00": "\ud83d\ude00"}', 32) == {"\U0001f600": "\U0001f600"}


def test_a_backslash_before_u_is_text_not_a_surrogate():
    assert loads_strict(rb'{"path": "C:\\ud800"}', 32) == {"path": "C:\\ud800"}


def test_a_nul_is_refused_where_it_is():
    error = refused(rb'{"events": [{"author": "a\u0000b"}]}')
    assert (error.code, error.details) == ("invalid_characters", {"field": "events[0].author"})
    assert refused(rb'{"k\u0000": 1}').details == {"field": "k\\x00"}


def test_a_named_document_is_named_in_messages():
    assert refused(b"[", name="filter").message.startswith("the filter is not valid JSON")
    assert refused(rb'"\ud800"', name="filter").details == {"field": "filter"}
    assert (
        refused(b"[" * 40 + b"]" * 40, name="filter").message
        == "the filter nests deeper than 32 levels"
    )


def test_a_key_in_an_error_is_bounded_and_never_a_credential():
    long_key = "k" * 300
    error = refused(json.dumps({long_key: "\ud800"}).encode())
    assert len(error.details["field"]) <= 64
    credential = "sk_" + "live_" + "4eC39HqLyjWDarjtT1zdp7dc"
    error = refused(json.dumps({credential: {"a": "\ud800"}}).encode())
    assert credential not in error.message and error.details == {"field": "[redacted].a"}
