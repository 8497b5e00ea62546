from django.urls import path

from memory.api import governance_views, ingest_views, views

base = "apps/<str:app>/users/<str:user>/memories"

urlpatterns = [
    path(base, views.MemoryListView.as_view(), name="memories"),
    path(f"{base}/search", views.MemorySearchView.as_view(), name="memory-search"),
    path(f"{base}/events", ingest_views.MemoryEventsView.as_view(), name="memory-events"),
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
        "apps/<str:app>/memory-policy",
        governance_views.MemoryPolicyView.as_view(),
        name="memory-policy",
    ),
]
