"""ctxadmin-client: the Python client of the ctxadmin REST API."""

from ._async import AsyncClient
from ._config import ENV_API_KEY, ENV_URL, USER_AGENT
from ._sync import Client
from ._version import __version__
from .errors import (
    AuthenticationError,
    ConfigurationError,
    ConflictError,
    CtxAdminError,
    EventIdConflictError,
    NotFoundError,
    PermissionDeniedError,
    RateLimitedError,
    RequestTooLargeError,
    ServerError,
    ServiceUnavailableError,
    SessionExistsError,
    StaleSessionError,
    TransportError,
    ValidationError,
)

__all__ = [
    "ENV_API_KEY",
    "ENV_URL",
    "USER_AGENT",
    "AsyncClient",
    "AuthenticationError",
    "Client",
    "ConfigurationError",
    "ConflictError",
    "CtxAdminError",
    "EventIdConflictError",
    "NotFoundError",
    "PermissionDeniedError",
    "RateLimitedError",
    "RequestTooLargeError",
    "ServerError",
    "ServiceUnavailableError",
    "SessionExistsError",
    "StaleSessionError",
    "TransportError",
    "ValidationError",
    "__version__",
]
