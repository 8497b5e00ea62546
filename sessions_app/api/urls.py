from django.urls import path

from sessions_app.api import views

base = "apps/<str:app>/users/<str:user>"

urlpatterns = [
    path(f"{base}/state", views.UserStateView.as_view(), name="user-state"),
    path(f"{base}/sessions", views.SessionListView.as_view(), name="sessions"),
    path(f"{base}/sessions/<str:sid>", views.SessionDetailView.as_view(), name="session"),
    path(f"{base}/sessions/<str:sid>/events", views.EventListView.as_view(), name="events"),
    path(f"{base}/sessions/<str:sid>/context", views.ContextView.as_view(), name="context"),
]
