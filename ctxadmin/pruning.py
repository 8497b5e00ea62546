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


# Text that carries a credential: ``api_key=...``, ``Authorization: Bearer ...``, private-key
# blocks, cloud access key ids, ``password=...``. Used where free text is kept or quoted.
_SECRET_TEXT = re.compile(
    r"(?i)(?:\b(?:api[-_ ]?key|access[-_ ]?token|refresh[-_ ]?token|client[-_ ]?secret"
    r"|secret[-_ ]?key|password|passwd|pwd|token)\s*[:=]\s*\S{4,})"
    r"|(?:\bbearer\s+[A-Za-z0-9._~+/=-]{12,})"
    r"|(?:-----BEGIN (?:[A-Z ]+ )?PRIVATE KEY-----)"
    r"|(?:\b(?:AKIA|ASIA)[A-Z0-9]{16}\b)"
    r"|(?:\b(?:sk|pk|rk)-[A-Za-z0-9_-]{20,})"
    r"|(?:\bgh[pousr]_[A-Za-z0-9]{30,})"
    r"|(?:\bAIza[0-9A-Za-z_-]{30,})"
)


def looks_like_secret(text: str) -> bool:
    """Whether free text appears to contain a credential (a cautious, pattern-based check)."""
    return _SECRET_TEXT.search(text) is not None


# What ``redact_secret_text`` replaces: the spans ``_SECRET_TEXT`` finds, with a private-key
# block taken whole (to its END line, or to the end of the text when it has none).
_PRIVATE_KEY_BLOCK = re.compile(
    r"-----BEGIN (?:[A-Z ]+ )?PRIVATE KEY-----.*?(?:-----END (?:[A-Z ]+ )?PRIVATE KEY-----|\Z)",
    re.DOTALL,
)


def redact_secret_text(text: str, marker: str = "[redacted]") -> str:
    """``text`` with every credential-looking span replaced by ``marker``."""
    return _SECRET_TEXT.sub(marker, _PRIVATE_KEY_BLOCK.sub(marker, text))
