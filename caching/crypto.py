"""Provider resource names, encrypted at rest (Fernet: AES-128-CBC with HMAC-SHA256).

``CTXADMIN_CACHE_ENCRYPTION_KEYS`` lists Fernet keys: the first encrypts, all decrypt, so a
new key is rotated in by putting it first. Without one, a key is derived from SECRET_KEY.
"""

from __future__ import annotations

import base64
import hashlib
from functools import lru_cache

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured


@lru_cache(maxsize=4)
def _cipher(keys: tuple[str, ...], secret_key: str) -> MultiFernet:
    if not keys:
        derived = hashlib.sha256(b"ctxadmin.cache.resource-name\0" + secret_key.encode()).digest()
        keys = (base64.urlsafe_b64encode(derived).decode("ascii"),)
    try:
        return MultiFernet([Fernet(key) for key in keys])
    except ValueError:
        raise ImproperlyConfigured(
            "CTXADMIN_CACHE_ENCRYPTION_KEYS must be Fernet keys (32 url-safe base64 bytes)"
        ) from None


def cipher() -> MultiFernet:
    return _cipher(tuple(settings.CTXADMIN_CACHE_ENCRYPTION_KEYS), settings.SECRET_KEY)


def encrypt(name: str) -> str:
    return cipher().encrypt(name.encode("utf-8")).decode("ascii")


def decrypt(token: str) -> str | None:
    """The name, or None when no configured key opens it (a key was removed)."""
    try:
        return cipher().decrypt(token.encode("ascii")).decode("utf-8")
    except InvalidToken:
        return None
