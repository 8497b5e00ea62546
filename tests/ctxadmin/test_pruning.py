"""Properties of secret pruning (pure): every spelling of a secret name, at any depth."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ctxadmin.pruning import has_secret_keys, is_secret_key, prune_secrets
from tests.context_strategies import (
    GLUED_SECRET_NAMES,
)

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
