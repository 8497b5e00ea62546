from django.urls import path

from sessions_app.artifacts.api import views

base = "apps/<str:app>/users/<str:user>/sessions/<str:sid>/artifacts"

urlpatterns = [
    path(base, views.ArtifactListView.as_view(), name="artifacts"),
    path(f"{base}/<str:name>", views.ArtifactDetailView.as_view(), name="artifact"),
    path(f"{base}/<str:name>/attach", views.ArtifactAttachView.as_view(), name="artifact-attach"),
    path(
        f"{base}/<str:name>/versions",
        views.ArtifactVersionListView.as_view(),
        name="artifact-versions",
    ),
]
