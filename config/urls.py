from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from console.dashboard import views as dashboard
from ctxadmin import health
from ctxadmin.api.errors import error_response

# Every app's endpoints, under one namespace ("api:<name>").
api_patterns = [
    path("", include("ctxadmin.api.urls")),
    path("", include("sessions_app.api.urls")),
    path("", include("runner.api.urls")),
    path("", include("memory.api.urls")),
    path("", include("caching.api.urls")),
    path("", include("sessions_app.artifacts.api.urls")),
    path("", include("sessions_app.threads.api.urls")),
]

urlpatterns = [
    path("", health.index, name="index"),
    path("api/v1/", include((api_patterns, "api"))),
    path("dev/v1/", include("console.diagnostics.urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="api-docs"),
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    path("metrics", health.metrics, name="metrics"),
    # Before the admin's own URLs; admin_view lets only active staff in (others: the login).
    path(
        "admin/dashboard/", admin.site.admin_view(dashboard.dashboard_page), name="admin-dashboard"
    ),
    path(
        "admin/dashboard/data.json",
        admin.site.admin_view(dashboard.dashboard_data),
        name="admin-dashboard-data",
    ),
    path("admin/", admin.site.urls),
]

_API_PREFIXES = ("/api/", "/dev/")


def _no_endpoint(path: str) -> str:
    """What an unknown API path is told: the path (bounded), and the likely slip."""
    from django.urls import Resolver404, resolve

    from ctxadmin.pruning import echoed

    message = f"No endpoint at {echoed(path, 120)!r}"
    for other in (path.rstrip("/"), path + "/"):
        if other != path:
            try:
                resolve(other)
            except Resolver404:
                continue
            return f"{message}; did you mean {echoed(other, 120)!r}?"
    if path.startswith("/api/") and not path.startswith("/api/v1/"):
        return f"{message}: the API is under /api/v1/ (see /api/docs/)."
    return f"{message} (see /api/docs/)."


def handler404(request, exception=None):
    if request.path.startswith(_API_PREFIXES):
        return error_response(404, "not_found", _no_endpoint(request.path))
    from django.views.defaults import page_not_found

    return page_not_found(request, exception)


def handler400(request, exception=None):
    """Django's own 400s (a Host header outside ``ALLOWED_HOSTS``, another suspicious
    request): the envelope everywhere but the console, which keeps its HTML page. The
    offending value is not echoed."""
    if not request.path.startswith("/admin/"):
        from django.core.exceptions import DisallowedHost

        if isinstance(exception, DisallowedHost):
            return error_response(
                400, "disallowed_host", "The Host header names no host this service serves."
            )
        return error_response(400, "bad_request", "The request could not be understood.")
    from django.views.defaults import bad_request

    return bad_request(request, exception)


def handler500(request):
    if request.path.startswith(_API_PREFIXES):
        return error_response(500, "internal_error", "The server could not complete the request.")
    from django.views.defaults import server_error

    return server_error(request)
