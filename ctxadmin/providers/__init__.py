"""Model providers (Gemini, OpenAI-compatible servers, Anthropic): connections and errors
(``base``), the one HTTP transport (``transport``), each provider's wire format (``gemini``,
``gemini_caches``, ``openai_compat``, ``anthropic``, over the shared ``wire`` helpers) and
the calls over them: ``clients.complete_json`` (a JSON reply) and ``generate.generate`` (a
turn with tools). The embedders over the embeddings formats are ``memory.embedders``.

``complete_json`` is loaded on first use (a lazy import, on purpose): the settings module
imports this package to validate ``CTXADMIN_PROVIDERS``, and every process would otherwise
pay for importing httpx.
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
