"""Clients for model providers (Gemini, OpenAI-compatible servers, Anthropic) that ask for
JSON output. See ``ctxadmin.providers.clients`` for the wire formats.

``complete_json`` is loaded on first use: the settings module imports this package to
validate ``CTXADMIN_PROVIDERS``, and every process would otherwise pay for importing httpx.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ctxadmin.providers.base import (
    DEFAULT_MAX_OUTPUT_BYTES,
    ERROR_CODES,
    KINDS,
    Completion,
    ProviderConnection,
    ProviderError,
    ProviderKind,
    UnknownConnection,
    connections_from_settings,
    get_connection,
    parse_providers,
    validate_providers,
)

if TYPE_CHECKING:
    from ctxadmin.providers.clients import complete_json

__all__ = [
    "DEFAULT_MAX_OUTPUT_BYTES",
    "ERROR_CODES",
    "KINDS",
    "Completion",
    "ProviderConnection",
    "ProviderError",
    "ProviderKind",
    "UnknownConnection",
    "complete_json",
    "connections_from_settings",
    "get_connection",
    "parse_providers",
    "validate_providers",
]


def __getattr__(name: str) -> Any:
    if name == "complete_json":
        from ctxadmin.providers.clients import complete_json

        return complete_json
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
