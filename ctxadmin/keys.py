"""API key format, generation and hashing (pure; no Django import).

A key reads ``ctx_<prefix>_<secret>``: a 10-character lowercase prefix that is stored in
clear (to find the row and to show operators which key is which) and a 256-bit secret. Only
the SHA-256 digest of the whole key is stored; the key is high-entropy, so a fast hash is
the right one (a password hash would only slow every request down).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import string

KEY_PREFIX = "ctx_"
PREFIX_ALPHABET = string.ascii_lowercase + string.digits
PREFIX_LENGTH = 10
_KEY_RE = re.compile(r"^ctx_([a-z0-9]{10})_([A-Za-z0-9_-]{43})\Z")


def generate_key() -> tuple[str, str]:
    """A new ``(prefix, key)``."""
    prefix = "".join(secrets.choice(PREFIX_ALPHABET) for _ in range(PREFIX_LENGTH))
    return prefix, f"{KEY_PREFIX}{prefix}_{secrets.token_urlsafe(32)}"


def parse_key(key: str) -> str | None:
    """The prefix of a well-formed key, or None."""
    match = _KEY_RE.match(key)
    return match.group(1) if match else None


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def digest_matches(key: str, stored_hash: str) -> bool:
    return hmac.compare_digest(hash_key(key), stored_hash)
