"""Graph threads over REST (thin: ``threads.rules`` parses, ``threads.services`` decides)."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status
from rest_framework.response import Response

from ctxadmin.api.pagination import PAGINATION_QUERY_PARAMS, Cursor
from ctxadmin.api.schema import ref
from ctxadmin.api.views import AppScopedView
from ctxadmin.errors import ServiceError
from ctxadmin.models import SCOPE_SESSIONS
from sessions_app.threads import rules, services

LIST_PARAMS = frozenset({"checkpoint_ns", "checkpoint_id", "before", "filter"})


class NewestFirst(Cursor):
    ordering = ("-checkpoint_id", "checkpoint_ns", "thread_id")


class ThreadsScopedView(AppScopedView):
    required_scopes = {"*": SCOPE_SESSIONS}
    user_field = None


def _parameter(request, name: str, parse):
    value = request.query_params.get(name)  # given once: the base view sees to it
    if value is None:
        return None
    try:
        return parse(value)
    except rules.RuleError as error:
        raise ServiceError(
            "invalid_parameter", f"{name}: {error.message}", details={"parameter": name}
        ) from None


def _listed(view, request, thread_id: str | None):
    rows = services.checkpoints(
        view.tenant,
        thread_id=thread_id,
        checkpoint_ns=_parameter(request, "checkpoint_ns", rules.checkpoint_ns),
        checkpoint_id=_parameter(request, "checkpoint_id", rules.checkpoint_id),
        before=_parameter(request, "before", rules.checkpoint_id),
        metadata_filter=_parameter(request, "filter", rules.parse_filter),
    )
    page = view.paginate_queryset(rows)
    return view.get_paginated_response(services.as_json(list(page)))


_LIST_PARAMETERS = [
    OpenApiParameter("checkpoint_ns", str, description="one namespace (default: every one)"),
    OpenApiParameter("checkpoint_id", str, description="one checkpoint id"),
    OpenApiParameter("before", str, description="only checkpoints with a smaller id"),
    OpenApiParameter(
        "filter",
        str,
        description="a JSON object: metadata keys and the values they must equal "
        "(at most 32 keys, 16 KiB)",
    ),
]


class AppCheckpointListView(ThreadsScopedView):
    allowed_query_params = PAGINATION_QUERY_PARAMS | LIST_PARAMS
    pagination_class = NewestFirst

    @extend_schema(
        operation_id="checkpoints_list",
        description="The checkpoints of every thread of the app, newest id first, each with "
        "its channel blobs and pending writes.",
        parameters=_LIST_PARAMETERS,
        responses={200: ref("GraphCheckpointPage")},
    )
    def get(self, request, app):
        return _listed(self, request, None)


class ThreadView(ThreadsScopedView):
    @extend_schema(
        operation_id="thread_delete",
        description="Delete the thread with every checkpoint, blob and write (204 also when "
        "there is no such thread).",
        responses={204: None},
    )
    def delete(self, request, app, thread):
        services.delete_thread(self.tenant, thread)
        return Response(status=status.HTTP_204_NO_CONTENT)


class ThreadCheckpointsView(ThreadsScopedView):
    pagination_class = NewestFirst

    @property
    def allowed_query_params(self) -> frozenset[str]:
        if self.request.method == "GET":
            return PAGINATION_QUERY_PARAMS | LIST_PARAMS
        return frozenset()

    @extend_schema(
        operation_id="thread_checkpoints_list",
        description="The thread's checkpoints, newest id first, each with its channel blobs "
        "and pending writes (`limit=1` with `checkpoint_ns`: the latest).",
        parameters=_LIST_PARAMETERS,
        responses={200: ref("GraphCheckpointPage")},
    )
    def get(self, request, app, thread):
        return _listed(self, request, thread)

    @extend_schema(
        operation_id="thread_checkpoints_put",
        description="Store a checkpoint (a repeat of its id replaces it) with the blobs of its "
        "new channel versions; a blob already stored for its (namespace, channel, version) is "
        "kept. The thread is made if new. The namespace's checkpoints beyond "
        "CTXADMIN_THREAD_CHECKPOINTS_KEEP are pruned with their writes and unreachable blobs.",
        request={"application/json": ref("GraphCheckpointPut")},
        responses={201: ref("GraphCheckpointStored")},
    )
    def post(self, request, app, thread):
        try:
            put = rules.parse_put(request.data)
        except rules.RuleError as error:
            raise services.api_error(error) from None
        result = services.put_checkpoint(self.tenant, thread, put)
        return Response(
            {
                "thread_id": thread,
                "checkpoint_ns": put.checkpoint_ns,
                "checkpoint_id": result.checkpoint_id,
                "blobs_stored": result.blobs_stored,
                "pruned": result.pruned,
            },
            status=status.HTTP_201_CREATED,
        )


class ThreadCheckpointView(ThreadsScopedView):
    allowed_query_params = frozenset({"checkpoint_ns"})

    @extend_schema(
        operation_id="thread_checkpoint_get",
        description="One checkpoint of the namespace (default the root, ``), with its channel "
        "blobs and pending writes; 404 when there is none.",
        parameters=[OpenApiParameter("checkpoint_ns", str, description="default ``")],
        responses={200: ref("GraphCheckpoint")},
    )
    def get(self, request, app, thread, checkpoint_id):
        ns = _parameter(request, "checkpoint_ns", rules.checkpoint_ns) or ""
        return Response(services.get_checkpoint(self.tenant, thread, ns, checkpoint_id))


class ThreadWritesView(ThreadsScopedView):
    @extend_schema(
        operation_id="thread_checkpoint_writes_put",
        description="Store a task's pending writes against the checkpoint. A write whose "
        "(task, idx) is stored is kept; LangGraph's special channels (negative idx) replace.",
        request={"application/json": ref("GraphWritesPut")},
        responses={201: ref("GraphWritesStored")},
    )
    def post(self, request, app, thread, checkpoint_id):
        try:
            put = rules.parse_writes(request.data)
        except rules.RuleError as error:
            raise services.api_error(error) from None
        count = services.put_writes(self.tenant, thread, checkpoint_id, put)
        return Response({"writes": count}, status=status.HTTP_201_CREATED)
