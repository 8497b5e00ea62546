"""The ground's own endpoints: an app and its API keys (the project's URL conf assembles
every app's endpoints under ``/api/v1/``)."""

from django.urls import path

from ctxadmin.api import tenancy

urlpatterns = [
    path("whoami", tenancy.WhoAmIView.as_view(), name="whoami"),
    path("apps/<str:app>/", tenancy.AppView.as_view(), name="app"),
    path("apps/<str:app>/key", tenancy.CurrentKeyView.as_view(), name="current-key"),
    path("apps/<str:app>/keys", tenancy.ApiKeyListView.as_view(), name="api-keys"),
    path("apps/<str:app>/keys/<str:prefix>", tenancy.ApiKeyDetailView.as_view(), name="api-key"),
    path(
        "apps/<str:app>/keys/<str:prefix>/rotate",
        tenancy.ApiKeyRotateView.as_view(),
        name="api-key-rotate",
    ),
]
