"""Secret pruning (pure; no Django import).

Keys that name credentials are removed at any depth of a JSON value. Names are compared
case-insensitively and across ``-``, ``_``, ``.``, space and camelCase spellings
(``apiKey``, ``API-KEY``, ``api_key`` are one name), and a key matches when its normalised
form ends with a secret name, so ``openai_api_key`` and ``x-client-secret`` match too:
pruning a harmless key is the safe mistake.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

SECRET_NAMES = frozenset(
    {
        "apikey",
        "accesstoken",
        "refreshtoken",
        "idtoken",
        "authtoken",
        "bearertoken",
        "sessiontoken",
        "authorization",
        "clientsecret",
        "password",
        "passwd",
        "secret",
        "privatekey",
        "cookie",  # also set-cookie: names match by suffix
    }
)
_SEPARATORS = re.compile(r"[-_.\s]")


def normalise_key(name: str) -> str:
    return _SEPARATORS.sub("", name).lower()


@lru_cache(maxsize=8192)  # keys repeat across events; pruning runs on every append and build
def is_secret_key(name: str) -> bool:
    normalised = normalise_key(name)
    return any(normalised.endswith(secret) for secret in SECRET_NAMES)


def prune_secrets(value: Any) -> Any:
    """A copy of ``value`` without secret-named keys at any depth (iterative: no recursion
    limit to exhaust on deep input)."""
    if not isinstance(value, dict | list):
        return value
    root: Any = {} if isinstance(value, dict) else []
    stack: list[tuple[Any, Any]] = [(value, root)]
    while stack:
        source, target = stack.pop()
        items = source.items() if isinstance(source, dict) else enumerate(source)
        for key, child in items:
            if isinstance(source, dict) and is_secret_key(key):
                continue
            if isinstance(child, dict | list):
                copy: Any = {} if isinstance(child, dict) else []
                stack.append((child, copy))
                child = copy
            if isinstance(target, dict):
                target[key] = child
            else:
                target.append(child)
    return root


def has_secret_keys(value: Any) -> bool:
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            for key, child in node.items():
                if is_secret_key(key):
                    return True
                stack.append(child)
        elif isinstance(node, list):
            stack.extend(node)
    return False
