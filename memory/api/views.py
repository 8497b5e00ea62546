"""Long-term memory over REST: add, list, get, delete and search, in one (app, user) scope."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.response import Response

from ctxadmin.api.views import AppScopedView
from ctxadmin.models import SCOPE_MEMORY
from memory import services
from sessions_app.api.schemas import ref

JSON = "application/json"


class MemoryScopedView(AppScopedView):
    required_scopes = {"*": SCOPE_MEMORY}


class MemoryListView(MemoryScopedView):
    """Add a memory (idempotent with ``idempotency_key``)."""

    @extend_schema(
        operation_id="memories_add",
        request={JSON: ref("MemoryCreate")},
        responses={201: ref("Memory"), 200: ref("Memory")},
    )
    def post(self, request, app, user):
        new = services.parse_new_memory(request.data)
        entry, created = services.add_memory(self.tenant, user, new)
        return Response(entry, status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)


class MemoryDetailView(MemoryScopedView):
    @extend_schema(operation_id="memories_get", responses={200: ref("Memory")})
    def get(self, request, app, user, memory_id):
        return Response(services.get_memory(self.tenant, user, memory_id))

    @extend_schema(operation_id="memories_delete", responses={204: None})
    def delete(self, request, app, user, memory_id):
        services.delete_memory(self.tenant, user, memory_id)
        return Response(status=status.HTTP_204_NO_CONTENT)


class MemorySearchView(MemoryScopedView):
    @extend_schema(
        operation_id="memories_search",
        request={JSON: ref("MemorySearch")},
        responses={200: ref("MemorySearchResult")},
    )
    def post(self, request, app, user):
        search = services.parse_search(request.data)
        return Response({"hits": services.search(self.tenant, user, search)})
