"""The app itself: its content-free summary, its settings, and its API keys' metadata."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from ctxadmin.api.pagination import PAGINATION_QUERY_PARAMS, Cursor
from ctxadmin.api.serializers import StrictCharField, StrictSerializer
from ctxadmin.api.views import AppScopedView
from ctxadmin.delegated import DelegatedCredential
from ctxadmin.errors import ServiceError, invalid
from ctxadmin.models import SCOPE_ADMIN, SCOPE_DIAGNOSTICS, SCOPES, ApiKey
from ctxadmin.selectors import app_summary
from ctxadmin.services import create_api_key, revoke_api_keys, rotate_api_key, update_app


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


class ApiKeyCreateSerializer(StrictSerializer):
    # The refusal names the choices, never the value sent (it may be long, or a credential).
    scopes = serializers.ListField(
        child=serializers.ChoiceField(
            choices=SCOPES,
            error_messages={"invalid_choice": f"is not a scope; choose from {', '.join(SCOPES)}"},
        ),
        allow_empty=False,
        max_length=len(SCOPES),
    )
    name = StrictCharField(max_length=100, allow_blank=True, required=False)


class ApiKeyCreatedSerializer(ApiKeyInfoSerializer):
    key = serializers.SerializerMethodField(help_text="The secret: shown in this answer only.")

    class Meta(ApiKeyInfoSerializer.Meta):
        fields = [*ApiKeyInfoSerializer.Meta.fields, "key"]

    def get_key(self, key: ApiKey) -> str:
        return self.context["secret"]


def _created(key: ApiKey, secret: str) -> Response:
    answer = Response(
        ApiKeyCreatedSerializer(key, context={"secret": secret}).data,
        status=status.HTTP_201_CREATED,
    )
    answer["Cache-Control"] = "no-store"  # the secret is in this answer and nowhere else
    return answer


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

    @extend_schema(
        operation_id="api_keys_create",
        request=ApiKeyCreateSerializer,
        responses={201: ApiKeyCreatedSerializer},
        description="A new key of the app with the scopes given; its secret (`key`) is in "
        "this answer only.",
    )
    def post(self, request, app):
        payload = ApiKeyCreateSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        key, secret = create_api_key(
            self.tenant,
            payload.validated_data["scopes"],
            name=payload.validated_data.get("name", ""),
        )
        return _created(key, secret)


class ApiKeyRotateView(AppScopedView):
    """``POST``: a new key with the old one's scopes and name; the old one is revoked at once
    (``admin`` scope). Rotating the calling key itself is allowed: its next request is 401."""

    required_scopes = {"*": SCOPE_ADMIN}
    queryset = ApiKey.objects.select_related("app")
    serializer_class = ApiKeyCreatedSerializer
    lookup_field = "prefix"
    lookup_url_kwarg = "prefix"
    user_field = None

    @extend_schema(
        operation_id="api_key_rotate", request=None, responses={201: ApiKeyCreatedSerializer}
    )
    def post(self, request, app, prefix):
        if request.data:
            raise invalid("body", "rotating a key takes no body")
        key = self.get_object()
        if not key.is_active:
            raise invalid("prefix", "a revoked key cannot be rotated")
        return _created(*rotate_api_key(key))


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


class WhoAmISerializer(serializers.Serializer):
    app = serializers.CharField(help_text="The app this credential belongs to.")
    credential = serializers.ChoiceField(choices=["api_key", "user_token", "tool_token"])
    prefix = serializers.CharField(help_text="The credential's public prefix.")
    scopes = serializers.ListField(
        child=serializers.CharField(), help_text="An API key's scopes ([] for a token)."
    )
    capabilities = serializers.ListField(
        child=serializers.CharField(), help_text="A token's capabilities ([] for an API key)."
    )
    user_id = serializers.CharField(allow_null=True, help_text="A token's user (null for a key).")
    session_id = serializers.CharField(
        allow_null=True, help_text="The session a token is bound to (null: none)."
    )


_TOKEN_KINDS = {"usertoken": "user_token", "tooltoken": "tool_token"}


def whoami(credential) -> dict:
    if isinstance(credential, DelegatedCredential):
        return {
            "app": credential.app.name,
            "credential": _TOKEN_KINDS.get(credential.credential_kind, "user_token"),
            "prefix": credential.prefix,
            "scopes": [],
            "capabilities": sorted(credential.capabilities),
            "user_id": credential.bound_user_id,
            "session_id": credential.bound_session_id,
        }
    return {
        "app": credential.app.name,
        "credential": "api_key",
        "prefix": credential.prefix,
        "scopes": sorted(credential.scopes),
        "capabilities": [],
        "user_id": None,
        "session_id": None,
    }


class WhoAmIView(APIView):
    """Who the caller is: the app its credential belongs to and what it may do, so a client
    needs only its key (no scope or capability needed; never the secret)."""

    @extend_schema(
        operation_id="whoami",
        summary="The calling credential's app and rights",
        responses=WhoAmISerializer,
    )
    def get(self, request):
        if request.query_params:
            raise ServiceError(
                "unknown_parameter",
                "this endpoint takes no query parameters",
                details={"allowed": []},
            )
        return Response(WhoAmISerializer(whoami(request.auth)).data)
