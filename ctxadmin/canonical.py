"""Canonical JSON and fingerprints (pure; no Django import).

Canonical JSON: keys sorted, UTF-8, no insignificant whitespace. The same logical value gives
the same bytes whatever the key order it arrived in, so its SHA-256 is a stable fingerprint.
Secrets are pruned before anything is fingerprinted (see ``ctxadmin.pruning``).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

_encoder = json.JSONEncoder(
    ensure_ascii=False, sort_keys=True, separators=(",", ":"), allow_nan=False
)


def canonical_json(value: Any) -> bytes:
    return _encoder.encode(value).encode("utf-8")


def canonical_size(value: Any) -> int:
    return len(canonical_json(value))


def fingerprint(value: Any) -> str:
    """SHA-256 (hex) of the canonical JSON of ``value``."""
    return hashlib.sha256(canonical_json(value)).hexdigest()
