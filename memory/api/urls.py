from django.urls import path

from memory.api import ingest_views, views

base = "apps/<str:app>/users/<str:user>/memories"

urlpatterns = [
    path(base, views.MemoryListView.as_view(), name="memories"),
    path(f"{base}/search", views.MemorySearchView.as_view(), name="memory-search"),
    path(f"{base}/events", ingest_views.MemoryEventsView.as_view(), name="memory-events"),
    path(f"{base}/<str:memory_id>", views.MemoryDetailView.as_view(), name="memory"),
]
