from django.urls import path

from console.diagnostics import views

app_name = "diagnostics"

session = "context/<str:app>/<str:user>/<str:sid>"
memory = "memory/<str:app>/<str:user>"

urlpatterns = [
    path(session, views.ContextDiagnosticsView.as_view(), name="context"),
    path(f"{session}/lifecycle", views.LifecycleDiagnosticsView.as_view(), name="lifecycle"),
    path(
        f"{session}/cache/invalidate",
        views.CacheInvalidateDiagnosticsView.as_view(),
        name="cache-invalidate",
    ),
    path(f"{memory}/search", views.MemorySearchDiagnosticsView.as_view(), name="memory-search"),
    path(f"{memory}/erase", views.MemoryEraseDiagnosticsView.as_view(), name="memory-erase"),
    path("outbox/<str:app>/stats", views.OutboxStatsDiagnosticsView.as_view(), name="outbox-stats"),
    path(
        "outbox/<str:app>/jobs/<str:job_id>",
        views.OutboxJobDiagnosticsView.as_view(),
        name="outbox-job",
    ),
]
