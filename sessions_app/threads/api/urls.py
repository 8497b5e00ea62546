from django.urls import path

from sessions_app.threads.api import views

base = "apps/<str:app>/threads/<str:thread>"

urlpatterns = [
    path("apps/<str:app>/checkpoints", views.AppCheckpointListView.as_view(), name="checkpoints"),
    path(base, views.ThreadView.as_view(), name="thread"),
    path(f"{base}/checkpoints", views.ThreadCheckpointsView.as_view(), name="thread-checkpoints"),
    path(
        f"{base}/checkpoints/<str:checkpoint_id>",
        views.ThreadCheckpointView.as_view(),
        name="thread-checkpoint",
    ),
    path(
        f"{base}/checkpoints/<str:checkpoint_id>/writes",
        views.ThreadWritesView.as_view(),
        name="thread-checkpoint-writes",
    ),
]
