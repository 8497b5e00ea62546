from django.urls import path

from memory.api import governance_views, ingest_views, outbox_views, profile_views, views

base = "apps/<str:app>/users/<str:user>/memories"

urlpatterns = [
    path(base, views.MemoryListView.as_view(), name="memories"),
    path(f"{base}/search", views.MemorySearchView.as_view(), name="memory-search"),
    path(f"{base}/batch", views.MemoryBatchView.as_view(), name="memory-batch"),
    path(f"{base}/touch", views.MemoryTouchView.as_view(), name="memory-touch"),
    path(f"{base}/events", ingest_views.MemoryEventsView.as_view(), name="memory-events"),
    path(
        f"{base}/ingestions",
        outbox_views.MemoryIngestionsView.as_view(),
        name="memory-ingestions",
    ),
    path(f"{base}/consent", governance_views.MemoryConsentView.as_view(), name="memory-consent"),
    path(
        f"{base}/legal-hold",
        governance_views.MemoryLegalHoldView.as_view(),
        name="memory-legal-hold",
    ),
    path(
        f"{base}/erasure-epoch",
        governance_views.MemoryErasureEpochView.as_view(),
        name="memory-erasure-epoch",
    ),
    # Literal paths above: a memory id is anything else after memories/.
    path(f"{base}/<str:memory_id>", views.MemoryDetailView.as_view(), name="memory"),
    path(
        "apps/<str:app>/users/<str:user>/profile",
        profile_views.ProfileView.as_view(),
        name="memory-profile",
    ),
    path("apps/<str:app>/memory-users", views.MemoryUsersView.as_view(), name="memory-users"),
    path(
        f"{base}/<str:memory_id>/history",
        views.MemoryHistoryView.as_view(),
        name="memory-history",
    ),
    path(
        f"{base}/<str:memory_id>/rollback",
        views.MemoryRollbackView.as_view(),
        name="memory-rollback",
    ),
    path(
        "apps/<str:app>/memory-policy",
        governance_views.MemoryPolicyView.as_view(),
        name="memory-policy",
    ),
    path(
        "apps/<str:app>/outbox/jobs/<str:job_id>",
        outbox_views.OutboxJobView.as_view(),
        name="outbox-job",
    ),
    path(
        "apps/<str:app>/outbox/jobs/<str:job_id>/cancel",
        outbox_views.OutboxJobCancelView.as_view(),
        name="outbox-job-cancel",
    ),
    path(
        "apps/<str:app>/outbox/stats", outbox_views.OutboxStatsView.as_view(), name="outbox-stats"
    ),
]
