from django.urls import include, path

from ctxadmin.api import tenancy

app_name = "api"

urlpatterns = [
    path("apps/<str:app>/", tenancy.AppView.as_view(), name="app"),
    path("apps/<str:app>/key", tenancy.CurrentKeyView.as_view(), name="current-key"),
    path("apps/<str:app>/keys", tenancy.ApiKeyListView.as_view(), name="api-keys"),
    path("apps/<str:app>/keys/<str:prefix>", tenancy.ApiKeyDetailView.as_view(), name="api-key"),
    path("", include("sessions_app.api.urls")),
    path("", include("memory.api.urls")),
    path("", include("caching.api.urls")),
    path("", include("artifacts.api.urls")),
]
