"""What leaves through MCP (pure; no Django import).

An MCP client is an agent that hands tool output to its model, so every tool result and
resource is cleaned on its way out, whatever tool made it: keys that name credentials are
removed at any depth (``prune_secrets``, as the context builder prunes its history), a key
that is itself a credential is dropped, and every string that holds one is redacted
(``redact_secret_text``, the detector memory content and summaries are checked with). A new
tool needs nothing of its own to be covered.
"""

from __future__ import annotations

from typing import Any

from ctxadmin.pruning import REDACTED, looks_like_secret, prune_secrets, redact_secret_text


def _clean_text(text: str) -> str:
    if not looks_like_secret(text):
        return text
    text = redact_secret_text(text)
    # What the span redaction cannot isolate (a credential spread over the text) goes whole.
    return REDACTED if looks_like_secret(text) else text


def outbound(value: Any) -> Any:
    """A copy of ``value`` (JSON-shaped) safe to hand to an MCP client (iterative: no
    recursion limit to exhaust on deep results)."""
    value = prune_secrets(value)
    if isinstance(value, str):
        return _clean_text(value)
    if not isinstance(value, dict | list):
        return value
    stack: list[Any] = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            for key in list(node):
                if isinstance(key, str) and looks_like_secret(key):
                    del node[key]
                    continue
                child = node[key]
                if isinstance(child, str):
                    node[key] = _clean_text(child)
                elif isinstance(child, dict | list):
                    stack.append(child)
        else:
            for index, child in enumerate(node):
                if isinstance(child, str):
                    node[index] = _clean_text(child)
                elif isinstance(child, dict | list):
                    stack.append(child)
    return value
