from django.urls import path

from caching.api import views

base = "apps/<str:app>/cache"

urlpatterns = [
    path(f"{base}/acquire", views.CacheAcquireView.as_view(), name="cache-acquire"),
    path(f"{base}/invalidate", views.CacheInvalidateView.as_view(), name="cache-invalidate"),
    path(f"{base}/scopes/<str:fingerprint>", views.CacheScopeView.as_view(), name="cache-scope"),
]
