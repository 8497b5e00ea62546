"""The two secret detectors held to their tables: key-name pruning (``is_secret_key``,
``prune_secrets``) and credential-looking text (``looks_like_secret``,
``redact_secret_text``), plus the bounded echo of client strings in error messages."""

from __future__ import annotations

import pytest

from ctxadmin.pruning import (
    ECHO_CHARS,
    REDACTED,
    echoed,
    has_secret_keys,
    is_secret_key,
    key_words,
    looks_like_secret,
    prune_secrets,
    redact_secret_text,
)
from tests.secret_tables import ORDINARY_KEYS, ORDINARY_TEXTS, SECRET_KEYS, credential_texts

CREDENTIALS = credential_texts()


def test_the_tables_are_large_and_disjoint():
    assert len(set(SECRET_KEYS)) >= 150 and len(set(ORDINARY_KEYS)) >= 100
    assert not set(SECRET_KEYS) & set(ORDINARY_KEYS)
    assert len(CREDENTIALS) >= 80 and len(ORDINARY_TEXTS) >= 60


@pytest.mark.parametrize("name", SECRET_KEYS)
def test_a_credential_key_name_is_secret(name):
    assert is_secret_key(name), (name, key_words(name))


@pytest.mark.parametrize("name", ORDINARY_KEYS)
def test_an_ordinary_key_name_survives(name):
    assert not is_secret_key(name), (name, key_words(name))


def test_key_names_are_read_as_words():
    assert key_words("secretAccessKey") == ("secret", "access", "key")
    assert key_words("X-API-Key") == ("x", "api", "key")
    assert key_words("AWS_SECRET_ACCESS_KEY") == ("aws", "secret", "access", "key")
    assert key_words("oauth2Token") == ("oauth", "2", "token")
    assert key_words("APIKey") == ("api", "key")
    assert key_words("\uff41\uff50\uff49\uff3f\uff4b\uff45\uff59") == ("api", "key")  # fullwidth
    assert key_words("pass\u200bword") == ("password",)
    assert key_words("user:password") == ("user", "password")


def test_pruning_removes_every_credential_key_at_any_depth_and_keeps_every_ordinary_one():
    ordinary = {name: f"kept-{n}" for n, name in enumerate(ORDINARY_KEYS)}
    secret = {name: f"gone-{n}" for n, name in enumerate(SECRET_KEYS)}
    value = {
        "content": {"parts": [{"function_call": {"args": {**ordinary, **secret}}}]},
        "actions": {"state_delta": {**secret, "nested": [{**ordinary, **secret}]}},
        "generation_config": {**ordinary, **secret},
    }
    pruned = prune_secrets(value)
    assert pruned["content"]["parts"][0]["function_call"]["args"] == ordinary
    assert pruned["actions"]["state_delta"] == {"nested": [ordinary]}
    assert pruned["generation_config"] == ordinary
    assert not has_secret_keys(pruned) and has_secret_keys(value)


@pytest.mark.parametrize(("label", "text", "secret"), CREDENTIALS, ids=[c[0] for c in CREDENTIALS])
def test_a_credential_in_text_is_found_and_redacted(label, text, secret):
    assert looks_like_secret(text), label
    redacted = redact_secret_text(text)
    assert secret not in redacted, (label, redacted)
    assert REDACTED in redacted and not looks_like_secret(redacted), (label, redacted)
    # Inside a longer message, the words around it stay (an unterminated private-key block
    # goes to the end of the text).
    message = f"Note for later. {text}\nThanks, see you Tuesday."
    redacted = redact_secret_text(message)
    assert secret not in redacted, (label, redacted)
    assert redacted.startswith("Note for later. "), (label, redacted)
    if "-----END" in text or "PRIVATE KEY" not in text:
        assert redacted.endswith("\nThanks, see you Tuesday."), (label, redacted)


@pytest.mark.parametrize("text", ORDINARY_TEXTS)
def test_an_ordinary_text_is_left_alone(text):
    assert not looks_like_secret(text), text
    assert redact_secret_text(text) == text


def test_redaction_replaces_exactly_the_original_characters_of_a_normalised_match():
    hidden = "pass\u200bword=hunter22x"
    text = f"caf\u00e9 \u2014 {hidden} \u2014 ol\u00e1"
    assert redact_secret_text(text) == f"caf\u00e9 \u2014 {REDACTED} \u2014 ol\u00e1"
    wide = "".join(chr(ord(c) + 0xFEE0) for c in "api_key=abcd1234efgh")
    assert redact_secret_text(f"\u00fcber {wide} ok") == f"\u00fcber {REDACTED} ok"
    # Only the user:password@ part of a URL goes.
    url = "postgres://app:s3cret-pw@db.internal:5432/app"
    assert redact_secret_text(url) == f"postgres://{REDACTED}db.internal:5432/app"


def test_a_private_key_block_goes_whole():
    block = "key:\n-----BEGIN EC PRIVATE KEY-----\nMHcCAQEE\nabc\n-----END EC PRIVATE KEY-----\nbye"
    assert redact_secret_text(block) == f"key:\n{REDACTED}\nbye"
    assert redact_secret_text("-----BEGIN PRIVATE KEY-----\nMIIE\nrest") == REDACTED


def test_an_echo_is_bounded_and_redacted():
    assert echoed("api_key") == "api_key"  # a credential's name is not a credential
    assert echoed("x" * 300) == "x" * (ECHO_CHARS - 1) + "…"
    assert len(echoed("y" * 65)) == ECHO_CHARS
    for _label, text, secret in CREDENTIALS:
        shown = echoed(text)
        assert secret not in shown and len(shown) <= ECHO_CHARS
    assert echoed(12) == "12"
