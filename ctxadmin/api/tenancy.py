"""The app itself: its content-free summary, its settings, and its API keys' metadata."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response

from ctxadmin.api.pagination import PAGINATION_QUERY_PARAMS, Cursor
from ctxadmin.api.serializers import StrictCharField, StrictSerializer
from ctxadmin.api.views import AppScopedView
from ctxadmin.models import SCOPE_ADMIN, SCOPE_DIAGNOSTICS, SCOPES, ApiKey
from ctxadmin.selectors import app_summary
from ctxadmin.services import revoke_api_keys, update_app


class KeyCountsSerializer(serializers.Serializer):
    active = serializers.IntegerField()
    revoked = serializers.IntegerField()


class AppSummarySerializer(serializers.Serializer):
    app = serializers.CharField()
    display_name = serializers.CharField()
    created_at = serializers.DateTimeField()
    api_keys = KeyCountsSerializer()


class AppUpdateSerializer(StrictSerializer):
    display_name = StrictCharField(max_length=200, allow_blank=True)


class ApiKeyInfoSerializer(serializers.ModelSerializer):
    app = serializers.CharField(source="app.name")
    scopes = serializers.ListField(child=serializers.ChoiceField(choices=SCOPES))
    state = serializers.SerializerMethodField()

    class Meta:
        model = ApiKey
        fields = [
            "app",
            "name",
            "prefix",
            "scopes",
            "state",
            "created_at",
            "last_used_at",
            "revoked_at",
        ]

    def get_state(self, key: ApiKey) -> str:
        return "active" if key.is_active else "revoked"


class AppView(AppScopedView):
    """``GET``: counts about the app (``diagnostics`` scope; never content).
    ``PATCH``: change its settings (``admin`` scope)."""

    required_scopes = {"GET": SCOPE_DIAGNOSTICS, "PATCH": SCOPE_ADMIN}
    serializer_class = AppSummarySerializer

    @extend_schema(operation_id="app_summary", responses=AppSummarySerializer)
    def get(self, request, app):
        return Response(AppSummarySerializer(app_summary(self.tenant)).data)

    @extend_schema(
        operation_id="app_update", request=AppUpdateSerializer, responses=AppSummarySerializer
    )
    def patch(self, request, app):
        payload = AppUpdateSerializer(data=request.data, partial=True)
        payload.is_valid(raise_exception=True)
        update_app(self.tenant, **payload.validated_data)
        return Response(AppSummarySerializer(app_summary(self.tenant)).data)


class CurrentKeyView(AppScopedView):
    """The calling key's own metadata (never its secret). Needs no scope."""

    serializer_class = ApiKeyInfoSerializer

    @extend_schema(operation_id="current_api_key", responses=ApiKeyInfoSerializer)
    def get(self, request, app):
        return Response(ApiKeyInfoSerializer(request.auth).data)


class ApiKeyListView(AppScopedView):
    """The app's keys, newest first (``admin`` scope). Secrets are never retrievable."""

    required_scopes = {"*": SCOPE_ADMIN}
    allowed_query_params = PAGINATION_QUERY_PARAMS
    queryset = ApiKey.objects.select_related("app")
    serializer_class = ApiKeyInfoSerializer
    pagination_class = Cursor
    user_field = None

    @extend_schema(operation_id="api_keys_list", responses=ApiKeyInfoSerializer(many=True))
    def get(self, request, app):
        page = self.paginate_queryset(self.get_queryset())
        return self.get_paginated_response(self.get_serializer(page, many=True).data)


class ApiKeyDetailView(AppScopedView):
    """One key of the app by prefix; ``DELETE`` revokes it (``admin`` scope)."""

    required_scopes = {"*": SCOPE_ADMIN}
    queryset = ApiKey.objects.select_related("app")
    serializer_class = ApiKeyInfoSerializer
    lookup_field = "prefix"
    lookup_url_kwarg = "prefix"
    user_field = None

    @extend_schema(operation_id="api_key_get")
    def get(self, request, app, prefix):
        return Response(self.get_serializer(self.get_object()).data)

    @extend_schema(operation_id="api_key_revoke", responses={204: None})
    def delete(self, request, app, prefix):
        key = self.get_object()
        revoke_api_keys(self.get_queryset().filter(pk=key.pk))
        return Response(status=status.HTTP_204_NO_CONTENT)
