"""The context envelope and its accounting (pure; no Django import).

The envelope is what an app sends to its model: instructions, generation config, tool
declarations, the selected history, the memory slot and the current input. Its size is
counted per category; a framing allowance covers the JSON around the parts. Secrets are
pruned from everything but the tool declarations (whose schemas legitimately name fields
such as ``password``), and the fingerprint is the SHA-256 of the canonical envelope.
"""

from __future__ import annotations

import hashlib
from typing import Any

from ctxadmin.canonical import canonical_json, canonical_size
from ctxadmin.pruning import prune_secrets
from sessions_app.events import estimate_tokens

# The envelope's own JSON around its parts (six keys, brackets, separators, and null or []
# for an absent part) is 99 bytes; with the current input's item allowance, 96 covers it.
FRAMING_BASE_BYTES = 96
FRAMING_PER_ITEM_BYTES = 8
# A profile part's key and separator (``"profile":`` and a comma), beyond the framing.
PROFILE_MEMBER_BYTES = len('"profile":,')
CATEGORIES = (
    "instructions",
    "generation_config",
    "tools",
    "history",
    "memory",
    "current_input",
    "framing",
)


def fixed_parts(
    *,
    instructions: str | None,
    generation_config: dict | None,
    tools: list | None,
    memory: list,
    current_input: dict,
) -> dict[str, Any]:
    """The non-history parts of the envelope, pruned."""
    return {
        "instructions": instructions,
        "generation_config": prune_secrets(generation_config) if generation_config else None,
        "tools": tools or [],
        "memory": prune_secrets(memory),
        "current_input": prune_secrets(current_input),
    }


def fixed_sizes(parts: dict[str, Any]) -> dict[str, int]:
    sizes = {
        "instructions": canonical_size(parts["instructions"]) if parts["instructions"] else 0,
        "generation_config": canonical_size(parts["generation_config"])
        if parts["generation_config"]
        else 0,
        "tools": canonical_size(parts["tools"]) if parts["tools"] else 0,
        "memory": canonical_size(parts["memory"]) if parts["memory"] else 0,
        "current_input": canonical_size(parts["current_input"]),
    }
    if "profile" in parts:  # only when asked for: its member's own key counted with it
        sizes["profile"] = canonical_size(parts["profile"]) + PROFILE_MEMBER_BYTES
    sizes["framing"] = FRAMING_BASE_BYTES + FRAMING_PER_ITEM_BYTES  # + the current input
    return sizes


def assemble(parts: dict[str, Any], history_json: list[str]) -> bytes:
    """The canonical JSON of the envelope. History items arrive already canonical (computed
    at append), so they are spliced in as text: the result equals ``canonical_json`` of the
    whole envelope without decoding or re-encoding any event."""
    members = []
    for key in sorted([*parts, "history"]):
        if key == "history":
            value = "[" + ",".join(history_json) + "]"
        else:
            value = canonical_json(parts[key]).decode("utf-8")
        members.append(f"{canonical_json(key).decode('utf-8')}:{value}")
    return ("{" + ",".join(members) + "}").encode("utf-8")


def accounting(
    sizes: dict[str, int], history_bytes: int, history_items: int, bytes_per_token: int
) -> dict:
    bytes_by = dict(sizes)
    bytes_by["history"] = history_bytes
    bytes_by["framing"] = sizes["framing"] + FRAMING_PER_ITEM_BYTES * history_items
    ordered = {category: bytes_by.get(category, 0) for category in CATEGORIES}
    if "profile" in bytes_by:
        ordered = {"profile": bytes_by["profile"], **ordered}
    ordered["total"] = sum(ordered.values())
    return {
        "bytes": ordered,
        "tokens": {key: estimate_tokens(value, bytes_per_token) for key, value in ordered.items()},
    }


def envelope_fingerprint(envelope_json: bytes) -> str:
    """SHA-256 of the canonical envelope: the same logical input gives the same value."""
    return hashlib.sha256(envelope_json).hexdigest()
