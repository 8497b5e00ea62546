"""Memory governance over REST: the app's policy, users' consent, legal holds and the
erasure epoch.

Reading needs the ``memory`` scope; so does recording consent. Changing the app's policy
and placing or lifting a legal hold need the ``admin`` scope.
"""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.response import Response

from ctxadmin.api.schema import ref
from ctxadmin.models import SCOPE_ADMIN, SCOPE_MEMORY
from memory import governance, scope
from memory.api.views import JSON, MemoryScopedView


class MemoryPolicyView(MemoryScopedView):
    """The app's memory policy (absent: the defaults, ``source: "default"``)."""

    required_scopes = {"GET": SCOPE_MEMORY, "PUT": SCOPE_ADMIN}
    user_field = None

    @extend_schema(operation_id="memory_policy_get", responses={200: ref("MemoryPolicyState")})
    def get(self, request, app):
        return Response(governance.policy_state(self.tenant))

    @extend_schema(
        operation_id="memory_policy_put",
        description="Replace the policy whole (a field left out takes its default). TTL and "
        "retention apply to entries written from then on.",
        request={JSON: ref("MemoryPolicy")},
        responses={200: ref("MemoryPolicyState")},
    )
    def put(self, request, app):
        return Response(governance.set_policy(self.tenant, request.data, request.auth.prefix))


class MemoryConsentView(MemoryScopedView):
    """The user's consent to long-term memory, as the app records it."""

    @extend_schema(operation_id="memory_consent_get", responses={200: ref("MemoryConsent")})
    def get(self, request, app, user):
        return Response(governance.consent_state(self.tenant, user))

    @extend_schema(
        operation_id="memory_consent_put",
        request={JSON: ref("MemoryConsentUpdate")},
        responses={200: ref("MemoryConsent")},
    )
    def put(self, request, app, user):
        return Response(
            governance.set_consent(self.tenant, user, request.data, request.auth.prefix)
        )


class MemoryLegalHoldView(MemoryScopedView):
    """A legal hold on the user's memory: no erasure, no expiry purge while it lasts."""

    required_scopes = {"GET": SCOPE_MEMORY, "PUT": SCOPE_ADMIN, "DELETE": SCOPE_ADMIN}

    @extend_schema(operation_id="memory_legal_hold_get", responses={200: ref("MemoryLegalHold")})
    def get(self, request, app, user):
        return Response(governance.legal_hold_state(self.tenant, user))

    @extend_schema(
        operation_id="memory_legal_hold_put",
        description="Place the hold (idempotent; no body, or `{}`).",
        request=None,
        responses={200: ref("MemoryLegalHold")},
    )
    def put(self, request, app, user):
        return Response(
            governance.place_legal_hold(self.tenant, user, request.data, request.auth.prefix)
        )

    @extend_schema(
        operation_id="memory_legal_hold_delete",
        description="Lift the user's hold (404 when there is none; an app-wide hold is part "
        "of the app's policy).",
        responses={204: None},
    )
    def delete(self, request, app, user):
        governance.release_legal_hold(self.tenant, user)
        return Response(status=status.HTTP_204_NO_CONTENT)


class MemoryErasureEpochView(MemoryScopedView):
    """The scope's current erasure epoch: queued work records it and sends it back as
    ``erasure_epoch``; a user erasure in between makes the write stale (409)."""

    @extend_schema(
        operation_id="memory_erasure_epoch_get", responses={200: ref("MemoryErasureEpoch")}
    )
    def get(self, request, app, user):
        return Response({"erasure_epoch": scope.current_epoch(self.tenant, user)})
