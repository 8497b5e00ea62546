"""The secret detectors' corpus as a whole: how many credential texts and key names it holds,
how many ordinary ones, and that the detectors catch every one of the first and none of the
second (``tests/secret_tables.py``; ``test_secret_detectors.py`` runs them one by one).

The counts are asserted so that a table cannot shrink unnoticed; grow them with a case the
detectors must meet, and the count with it."""

from __future__ import annotations

from ctxadmin.credentials import looks_like_secret, redact_secret_text
from ctxadmin.pruning import is_secret_key
from tests.secret_tables import ORDINARY_KEYS, ORDINARY_TEXTS, SECRET_KEYS, credential_texts

CREDENTIAL_TEXTS = 137
ORDINARY_TEXT_COUNT = 108
SECRET_KEY_COUNT = 263
ORDINARY_KEY_COUNT = 266


def test_every_credential_text_is_caught_and_no_ordinary_text_is():
    credentials = credential_texts()
    assert len(credentials) == CREDENTIAL_TEXTS
    assert len({label for label, _text, _secret in credentials}) == CREDENTIAL_TEXTS
    assert len(set(ORDINARY_TEXTS)) == ORDINARY_TEXT_COUNT
    caught = [label for label, text, _secret in credentials if looks_like_secret(text)]
    leaked = [label for label, text, secret in credentials if secret in redact_secret_text(text)]
    flagged = [text for text in ORDINARY_TEXTS if looks_like_secret(text)]
    changed = [text for text in ORDINARY_TEXTS if redact_secret_text(text) != text]
    assert (len(caught), leaked) == (CREDENTIAL_TEXTS, [])
    assert (flagged, changed) == ([], [])
    assert redact_secret_text("password: abc") == "[redacted]"  # three characters are enough


def test_every_credential_key_name_is_pruned_and_no_ordinary_one_is():
    assert len(set(SECRET_KEYS)) == SECRET_KEY_COUNT
    assert len(set(ORDINARY_KEYS)) == ORDINARY_KEY_COUNT
    missed = [name for name in SECRET_KEYS if not is_secret_key(name)]
    pruned = [name for name in ORDINARY_KEYS if is_secret_key(name)]
    assert (missed, pruned) == ([], [])


def test_a_private_key_split_across_text_parts_is_one_block_once_joined():
    """Every reader of an event's text (ingestion, the outbox, compaction, recall) joins its
    text parts with newlines: a block whose armour the join breaks is still found, and an
    END line alone takes the base64 lines before it."""
    body = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7\nq2VtZXJpYWxzZWNyZXRrZXk="
    splits = [
        ["Here it is: -----BEGIN RSA PRIVATE", f"KEY-----\n{body}\n-----END RSA PRIVATE KEY-----"],
        ["-----BEGIN", f"OPENSSH PRIVATE KEY-----\n{body}"],
        ["-----BEGIN PRIVATE KEY---", f"--\n{body}\n-----END PRIVATE KEY-----"],
        ["the key follows", f"{body}\n-----END PRIVATE KEY-----\nthanks"],
    ]
    for parts in splits:
        joined = "\n".join(parts)
        assert looks_like_secret(joined), parts
        redacted = redact_secret_text(joined)
        assert "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC" not in redacted, redacted
        assert "q2VtZXJpYWxzZWNyZXRrZXk" not in redacted, redacted
        assert not looks_like_secret(redacted), redacted
    inline = f"the key is {body}\n-----END PRIVATE KEY-----"
    assert redact_secret_text(inline) == "the key is [redacted]"
    assert redact_secret_text("\n".join(splits[-1])).endswith("thanks")
    assert redact_secret_text("\n".join(splits[-1])).startswith("the key follows\n")
