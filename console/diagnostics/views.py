"""The content-free diagnostics API (``/dev/v1/``): thin callers of ``services``.

A request is either an API key with the ``diagnostics`` scope, which reaches only its own
app (another app answers 404, as a missing one does), or a logged-in staff user's Django
session, which reaches every app (unsafe methods need the CSRF token, as in the console).
The writes also need the domain's scope on a key (``cache`` to invalidate, ``memory`` to
erase), and on a staff user the permission the console asks for the same action. The
endpoints are left out of the public OpenAPI schema (README documents them).
"""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import exceptions
from rest_framework.authentication import SessionAuthentication
from rest_framework.response import Response
from rest_framework.views import APIView

from console.diagnostics import services
from ctxadmin.api.paths import path_segment_error
from ctxadmin.api.views import AppScopedView
from ctxadmin.auth import ApiKeyAuthentication
from ctxadmin.errors import ServiceError
from ctxadmin.models import SCOPE_CACHE, SCOPE_DIAGNOSTICS, SCOPE_MEMORY, App
from memory import inputs as memory_inputs

ERASED_BY_LENGTH = 10  # ``ErasureReceipt.erased_by``


def operator_actor(user) -> str:
    """How a staff user is named in receipts and logs (at most 10 characters)."""
    name = f"op:{user.pk}"
    return name if len(name) <= ERASED_BY_LENGTH else "operator"


def _session_user(request):
    """The Django user of a session-authenticated request (None for keys and anonymous)."""
    user = request.user  # authenticates: a key first, then the session
    if request.auth is not None or user is None or not getattr(user, "is_authenticated", False):
        return None
    return user


@extend_schema(exclude=True)
class DiagnosticsView(AppScopedView):
    authentication_classes = [ApiKeyAuthentication, SessionAuthentication]
    required_scopes = {"*": SCOPE_DIAGNOSTICS}
    #: A second scope a key needs for a method (the writes), beyond ``diagnostics``.
    domain_scopes: dict[str, str] = {}
    #: The Django permission a staff user needs for a method (the writes).
    operator_permissions: dict[str, str] = {}

    actor: str

    def initial(self, request, *args, **kwargs):
        operator = _session_user(request)
        if operator is None:
            self._initial_for_key(request, *args, **kwargs)
        else:
            self._initial_for_operator(operator, request, *args, **kwargs)

    def _initial_for_key(self, request, *args, **kwargs):
        super().initial(request, *args, **kwargs)  # the key's app, path, scope, query
        needed = self.domain_scopes.get(request.method)
        if needed is not None and not request.auth.has_scope(needed):
            raise exceptions.PermissionDenied(f"This API key does not have the '{needed}' scope.")
        self.actor = request.auth.prefix

    def _initial_for_operator(self, operator, request, *args, **kwargs):
        if not operator.is_staff:
            raise exceptions.PermissionDenied(
                "Diagnostics need a staff account or an API key with the 'diagnostics' scope."
            )
        needed = self.operator_permissions.get(request.method)
        if needed is not None and not operator.has_perm(needed):
            raise exceptions.PermissionDenied(
                f"This account does not have the '{needed}' permission."
            )
        APIView.initial(self, request, *args, **kwargs)
        for name, value in kwargs.items():
            problem = path_segment_error(name, value)
            if problem:
                raise ServiceError("invalid_path_parameter", problem, details={"parameter": name})
        tenant = App.objects.filter(name=kwargs.get("app")).first()
        if tenant is None:
            raise exceptions.NotFound()
        self.check_query(request)
        self.tenant = tenant
        self.user_id = kwargs.get("user")
        self.actor = operator_actor(operator)


class ContextDiagnosticsView(DiagnosticsView):
    allowed_query_params = frozenset(services.CONTEXT_PARAMS)

    def get(self, request, app, user, sid):
        policy = services.context_policy_from_query(request.query_params)
        session = services.session_or_404(self.tenant, user, sid)
        return Response(services.context_report(session, policy))


class LifecycleDiagnosticsView(DiagnosticsView):
    allowed_query_params = frozenset({"model"})

    def get(self, request, app, user, sid):
        model = services.model_from_query(request.query_params)
        session = services.session_or_404(self.tenant, user, sid)
        return Response(services.lifecycle_report(session, model))


class CacheInvalidateDiagnosticsView(DiagnosticsView):
    domain_scopes = {"POST": SCOPE_CACHE}
    operator_permissions = {"POST": "caching.invalidate_cachescope"}

    def post(self, request, app, user, sid):
        confirmation = services.parse_confirmation(request.data)
        session = services.session_or_404(self.tenant, user, sid)
        return Response(services.invalidate_confirmed(session, confirmation, self.actor))


class MemorySearchDiagnosticsView(DiagnosticsView):
    def post(self, request, app, user):
        return Response(services.memory_search(self.tenant, user, request.data))


class MemoryEraseDiagnosticsView(DiagnosticsView):
    domain_scopes = {"POST": SCOPE_MEMORY}
    operator_permissions = {"POST": "memory.erase_memoryentry"}

    def post(self, request, app, user):
        memory_inputs.parse_user_confirmation(request.data, user)
        return Response(services.erase_user(self.tenant, user, self.actor))


class OutboxStatsDiagnosticsView(DiagnosticsView):
    def get(self, request, app):
        return Response(services.outbox_stats(self.tenant))


class OutboxJobDiagnosticsView(DiagnosticsView):
    def get(self, request, app, job_id):
        return Response(services.outbox_job(self.tenant, job_id))
