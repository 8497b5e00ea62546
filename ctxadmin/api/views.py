"""The scoped base view every tenant endpoint is built on.

It authenticates the API key, resolves ``{app}`` from the URL against the key's app (another
app answers 404, exactly like a missing one), validates the other path segments, checks the
key's scope for the method, rejects unknown, repeated and undecodable query parameters, and
hands subclasses only querysets already filtered by app (and by user where the URL has
``{user}``). Subclasses cannot override ``get_queryset``: the class refuses to be defined if
they try.
"""

from __future__ import annotations

from urllib.parse import unquote_to_bytes

from rest_framework import exceptions
from rest_framework.generics import GenericAPIView

from ctxadmin.api.paths import path_segment_error
from ctxadmin.delegated import DelegatedCredential
from ctxadmin.errors import ServiceError, not_found
from ctxadmin.models import ApiKey, App
from ctxadmin.pruning import MAX_ECHOED, echoed


class AppScopedView(GenericAPIView):
    #: The scope a key needs, per HTTP method (``"*"`` for any method); None needs no scope,
    #: a tuple any one of its scopes.
    required_scopes: dict[str, str | tuple[str, ...] | None] = {}
    #: What a tool token needs here, per HTTP method (absent: tool tokens are refused).
    tool_capabilities: dict[str, str] = {}
    #: Query parameters this endpoint understands; anything else is a 400.
    allowed_query_params: frozenset[str] = frozenset()
    #: Those of them that may be given more than once (the schema's array parameters); any
    #: other given twice is a 400, never read by its last value.
    repeatable_query_params: frozenset[str] = frozenset()
    #: Field paths from the model to its app and to its user id.
    app_field: str = "app"
    user_field: str | None = "user_id"

    tenant: App
    user_id: str | None

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "get_queryset" in cls.__dict__:
            raise TypeError(
                f"{cls.__name__} overrides get_queryset; narrow with filter_scoped() instead "
                "so the app/user scope cannot be bypassed"
            )

    def initial(self, request, *args, **kwargs):
        super().initial(request, *args, **kwargs)  # authentication and IsAuthenticated
        key = request.auth
        tool_token = key if isinstance(key, DelegatedCredential) else None
        if not isinstance(key, ApiKey) and tool_token is None:
            raise exceptions.NotAuthenticated()
        # Every segment's syntax first (it says nothing of other tenants), then the tenant:
        # another app's name, exactly as created, is a 404.
        for name, value in kwargs.items():
            problem = path_segment_error(name, value)
            if problem:
                raise ServiceError("invalid_path_parameter", problem, details={"parameter": name})
        if key.app.name != kwargs.get("app"):
            # Named from the request and the caller's own key alone: another app reads
            # exactly like a missing one.
            raise ServiceError(
                "not_found",
                f"App {echoed(kwargs.get('app'))!r} was not found: this credential belongs "
                f"to the app {key.app.name!r}.",
                status_code=404,
                details={"kind": "app", "id": echoed(kwargs.get("app"))},
            )
        if tool_token is not None:
            self._check_tool_token(tool_token, request.method, kwargs)
        else:
            scope = self.required_scopes.get(request.method, self.required_scopes.get("*"))
            # A tuple: any one of these scopes will do.
            if isinstance(scope, tuple) and not any(key.has_scope(one) for one in scope):
                named = "', '".join(scope)
                raise exceptions.PermissionDenied(f"This API key has none of the '{named}' scopes.")
            if isinstance(scope, str) and not key.has_scope(scope):
                raise exceptions.PermissionDenied(
                    f"This API key does not have the '{scope}' scope."
                )
        if request.method == "OPTIONS" or not hasattr(self, request.method.lower()):
            # A method the endpoint does not have is a 405, whatever its query string says.
            raise exceptions.MethodNotAllowed(request.method)
        self.check_query(request)
        self.tenant = key.app
        self.user_id = kwargs.get("user")

    def check_query(self, request) -> None:
        """Every query parameter decodes as UTF-8 (a ``%ED%A0%80`` or ``%FF`` is refused, not
        read as U+FFFD), is one this endpoint understands, and is given once unless it is
        repeatable."""
        undecodable = _undecodable_parameter(request.META.get("QUERY_STRING", ""))
        if undecodable is not None:
            raise ServiceError(
                "invalid_parameter",
                f"query parameter '{undecodable}' is not valid UTF-8 once percent-decoded",
                details={"parameter": undecodable},
            )
        unknown = sorted(set(request.query_params) - self.allowed_query_params)
        if unknown:
            raise ServiceError(
                "unknown_parameter",
                f"unknown query parameter {echoed(unknown[0])!r}",
                details={
                    "unknown": [echoed(name) for name in unknown[:MAX_ECHOED]],
                    "allowed": sorted(self.allowed_query_params),
                },
            )
        repeated = sorted(
            name
            for name, values in request.query_params.lists()
            if len(values) > 1 and name not in self.repeatable_query_params
        )
        if repeated:
            # Which of the values a proxy in front reads is anyone's guess: none is read.
            raise ServiceError(
                "invalid_parameter",
                f"{repeated[0]} must be given once",
                details={"parameter": repeated[0]},
            )

    def _check_tool_token(self, token: DelegatedCredential, method: str, kwargs: dict) -> None:
        """A delegated credential (a tool or user token) reaches only its own user and session
        (anything else is 404, as for another app), and only with the capability this
        endpoint needs."""
        if kwargs.get("user", token.bound_user_id) != token.bound_user_id:
            raise not_found("user", kwargs["user"], of="for this token (it reaches its own user)")
        bound_session = token.bound_session_id  # None: any session of its user
        if bound_session is not None and kwargs.get("sid", bound_session) != bound_session:
            raise not_found(
                "session", kwargs["sid"], of="for this token (it reaches its own session)"
            )
        needed = self.tool_capabilities.get(method, self.tool_capabilities.get("*"))
        if needed is None or needed not in token.capabilities:
            raise ServiceError(
                "capability_denied",
                (
                    f"This tool token lacks the capability {needed!r} this operation needs."
                    if needed
                    else "No tool token may call this operation; use an API key."
                ),
                status_code=403,
                details={"needed": needed},
            )

    def get_queryset(self):
        queryset = super().get_queryset().filter(**{self.app_field: self.tenant})
        if self.user_id is not None and self.user_field:
            queryset = queryset.filter(**{self.user_field: self.user_id})
        return self.filter_scoped(queryset)

    def filter_scoped(self, queryset):
        """Narrow the already scoped queryset further (e.g. by session)."""
        return queryset


def _undecodable_parameter(query_string: str) -> str | None:
    """The name (escaped, bounded) of the first query parameter whose name or value is not
    UTF-8 once percent-decoded, or None. WSGI hands the query string over as Latin-1."""
    raw = query_string.encode("iso-8859-1", "replace")
    for part in raw.split(b"&"):
        name, _, value = part.partition(b"=")
        for piece in (name, value):
            try:
                unquote_to_bytes(piece.replace(b"+", b" ")).decode("utf-8")
            except UnicodeDecodeError:
                decoded = unquote_to_bytes(name.replace(b"+", b" "))
                return echoed(decoded.decode("utf-8", "backslashreplace"))
    return None
