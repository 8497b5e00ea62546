from django.urls import path

from runner.api import views

base = "apps/<str:app>/users/<str:user>/sessions/<str:sid>"

urlpatterns = [
    path(f"{base}/context", views.ContextView.as_view(), name="context"),
    path(f"{base}/invocations", views.InvocationListView.as_view(), name="invocations"),
]
