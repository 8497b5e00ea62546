from django.urls import path

from sessions_app.api import compaction_views, invocation_views, user_token_views, views

base = "apps/<str:app>/users/<str:user>"

urlpatterns = [
    path("apps/<str:app>/sessions", views.AppSessionListView.as_view(), name="app-sessions"),
    path(
        "apps/<str:app>/user-tokens",
        user_token_views.AppUserTokenListView.as_view(),
        name="app-user-tokens",
    ),
    path(
        "apps/<str:app>/user-tokens/revoke",
        user_token_views.AppUserTokenRevokeView.as_view(),
        name="app-user-tokens-revoke",
    ),
    path(f"{base}/state", views.UserStateView.as_view(), name="user-state"),
    path(f"{base}/sessions", views.SessionListView.as_view(), name="sessions"),
    path(f"{base}/tokens", user_token_views.UserTokenListView.as_view(), name="user-tokens"),
    path(
        f"{base}/tokens/<str:prefix>",
        user_token_views.UserTokenDetailView.as_view(),
        name="user-token",
    ),
    path(f"{base}/sessions/<str:sid>", views.SessionDetailView.as_view(), name="session"),
    path(f"{base}/sessions/<str:sid>/events", views.EventListView.as_view(), name="events"),
    path(
        f"{base}/sessions/<str:sid>/invocations/<str:invocation>/tool-tokens",
        invocation_views.ToolTokenListView.as_view(),
        name="tool-tokens",
    ),
    path(
        f"{base}/sessions/<str:sid>/invocations/<str:invocation>/tool-tokens/<str:prefix>",
        invocation_views.ToolTokenDetailView.as_view(),
        name="tool-token",
    ),
    path(
        f"{base}/sessions/<str:sid>/state",
        invocation_views.SessionStateView.as_view(),
        name="session-state",
    ),
    path(
        "apps/<str:app>/tool-token",
        invocation_views.ToolTokenIdentityView.as_view(),
        name="tool-token-identity",
    ),
    path(
        f"{base}/sessions/<str:sid>/compaction-policy",
        compaction_views.SessionCompactionPolicyView.as_view(),
        name="session-compaction-policy",
    ),
    path(
        f"{base}/sessions/<str:sid>/compactions",
        compaction_views.CompactionListView.as_view(),
        name="compactions",
    ),
    path(
        f"{base}/sessions/<str:sid>/compactions/<str:compaction_id>",
        compaction_views.CompactionDetailView.as_view(),
        name="compaction",
    ),
    path(
        "apps/<str:app>/compaction-policy",
        compaction_views.AppCompactionPolicyView.as_view(),
        name="app-compaction-policy",
    ),
]
