"""Sessions, events and user state over REST (thin: services decide)."""

from __future__ import annotations

import json
from datetime import datetime

from django.conf import settings
from django.http import HttpResponse
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status
from rest_framework.response import Response

from ctxadmin.api.pagination import PAGINATION_QUERY_PARAMS, Cursor
from ctxadmin.api.paths import path_segment_error
from ctxadmin.api.schema import ref
from ctxadmin.api.views import AppScopedView
from ctxadmin.errors import ServiceError, invalid, session_not_found, strict_object
from ctxadmin.models import SCOPE_SESSIONS
from ctxadmin.pruning import echoed
from ctxadmin.timestamps import iso_timestamp
from sessions_app import history, selectors, services
from sessions_app import state as scopes
from sessions_app.events import (
    CONTENT_TYPES,
    EventError,
    parse_timestamp,
    validate_state_remove,
)
from sessions_app.models import Event, Session

JSON = "application/json"


def _int_param(request, name: str, *, minimum: int = 0) -> int | None:
    raw = request.query_params.get(name)
    if raw is None:
        return None
    if not raw.isdigit() or int(raw) < minimum:
        raise ServiceError(
            "invalid_parameter",
            f"{name} must be an integer >= {minimum}",
            details={"parameter": name},
        )
    return int(raw)


def _timestamp_param(request, name: str) -> datetime | None:
    raw = request.query_params.get(name)
    if raw is None:
        return None
    try:
        return parse_timestamp(float(raw) if _is_number(raw) else raw, name)
    except EventError as exc:
        raise ServiceError("invalid_parameter", exc.message, details={"parameter": name}) from None


def _is_number(raw: str) -> bool:
    try:
        float(raw)
    except ValueError:
        return False
    return True


def _bool_param(request, name: str, *, default: bool = False) -> bool:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    if raw not in {"true", "false", "1", "0"}:
        raise ServiceError(
            "invalid_parameter", f"{name} must be true or false", details={"parameter": name}
        )
    return raw in {"true", "1"}


def _list_param(request, name: str, *, choices: tuple[str, ...] | None = None) -> list[str] | None:
    raw = request.query_params.get(name)
    if raw is None:
        return None
    values = [value for value in raw.split(",") if value]
    if len(values) > 256:
        raise ServiceError(
            "invalid_parameter", f"{name} has more than 256 values", details={"parameter": name}
        )
    if choices is not None:
        unknown = sorted(set(values) - set(choices))
        if unknown:
            raise ServiceError(
                "invalid_parameter",
                f"{name}: unknown value {echoed(unknown[0])!r}; choose from {list(choices)}",
                details={"parameter": name},
            )
    return values


def _choice_param(request, name: str, choices: tuple[str, ...], default: str) -> str:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    if raw not in choices:
        raise ServiceError(
            "invalid_parameter",
            f"{name} must be one of {list(choices)}",
            details={"parameter": name},
        )
    return raw


SUMMARY_FIELDS = ("session_id", "user_id", "revision", "event_count", "created_at", "updated_at")


def session_summary(session: Session) -> dict:
    return {
        "session_id": session.session_id,
        "user_id": session.user_id,
        "revision": session.revision,
        "event_count": session.event_count,
        "created_at": iso_timestamp(session.created_at),
        "updated_at": iso_timestamp(session.updated_at),
    }


class SessionCursor(Cursor):
    """By last update (``updated_at``, then id), oldest or newest first as the view's
    ``order`` says; a cursor decodes only in the order that issued it."""

    def get_ordering(self, request, queryset, view):
        return ("updated_at", "id") if view.order == "asc" else ("-updated_at", "-id")

    def _salt(self, request) -> str:
        return f"{super()._salt(request)}:{self.ordering[0]}"


class EventCursor(Cursor):
    ordering = ("seq",)


class SessionsScopedView(AppScopedView):
    required_scopes = {"*": SCOPE_SESSIONS}
    queryset = Session.objects.all()

    def session_or_404(self, sid: str) -> Session:
        session = self.get_queryset().filter(session_id=sid).first()
        if session is None:
            raise session_not_found(self.user_id, sid)
        session.app = self.tenant  # known already: no query when a service reads it
        return session


SESSION_LIST_PARAMS = PAGINATION_QUERY_PARAMS | {"include", "order"}


def session_list_parameters(default_order: str) -> list[OpenApiParameter]:
    return [
        OpenApiParameter(
            "order",
            str,
            enum=["asc", "desc"],
            description=f"by last update (updated_at, then id); default {default_order}",
        ),
        OpenApiParameter(
            "include",
            str,
            enum=["state"],
            description="state: each session's state merged with its user: and app: state",
        ),
    ]


class SessionPageView(SessionsScopedView):
    """A page of session summaries by last update, each with its merged state on
    ``include=state`` (one more query for the page's app and user states)."""

    pagination_class = SessionCursor
    default_order = "desc"
    order = default_order

    def session_page(self, request, queryset):
        self.order = _choice_param(request, "order", ("asc", "desc"), self.default_order)
        with_state = "state" in (_list_param(request, "include", choices=("state",)) or ())
        fields = SUMMARY_FIELDS + (("state",) if with_state else ())
        page = self.paginate_queryset(queryset.only(*fields))
        rows = [session_summary(session) for session in page]
        if with_state:
            for row, state in zip(rows, selectors.merged_states(self.tenant, page), strict=True):
                row["state"] = state
        return self.get_paginated_response(rows)


class AppSessionListView(SessionPageView):
    """The app's sessions of every user (or of ``user_id``), oldest activity first by
    default (ADK's ``list_sessions`` order)."""

    allowed_query_params = SESSION_LIST_PARAMS | {"user_id"}
    default_order = "asc"

    @extend_schema(
        operation_id="app_sessions_list",
        parameters=[
            *session_list_parameters("asc"),
            OpenApiParameter("user_id", str, description="only this user's sessions"),
        ],
        responses={200: ref("SessionPage")},
    )
    def get(self, request, app):
        queryset = self.get_queryset()
        user_id = request.query_params.get("user_id")
        if user_id is not None:
            problem = path_segment_error("user", user_id)
            if problem:
                raise ServiceError(
                    "invalid_parameter",
                    problem.replace("user", "user_id", 1),
                    details={"parameter": "user_id"},
                )
            queryset = queryset.filter(user_id=user_id)
        return self.session_page(request, queryset)


class SessionListView(SessionPageView):
    """A user's sessions, newest activity first by default, by cursor; or create one."""

    allowed_query_params = SESSION_LIST_PARAMS

    @extend_schema(
        operation_id="sessions_list",
        parameters=session_list_parameters("desc"),
        responses={200: ref("SessionPage")},
    )
    def get(self, request, app, user):
        return self.session_page(request, self.get_queryset())

    @extend_schema(
        operation_id="sessions_create",
        request={JSON: ref("SessionCreate")},
        responses={201: ref("Session")},
    )
    def post(self, request, app, user):
        body = request.data
        strict_object(body, {"session_id", "state"})
        session_id = body.get("session_id")
        if session_id is not None:
            if not isinstance(session_id, str) or path_segment_error("sid", session_id):
                raise invalid(
                    "session_id", path_segment_error("sid", str(session_id)) or "must be a string"
                )
        state = body.get("state", {})
        if not isinstance(state, dict):
            raise invalid("state", "must be an object")
        session, merged = services.create_session(self.tenant, user, session_id, state)
        return Response(
            {
                **session_summary(session),
                "app": self.tenant.name,
                "state": merged,
                "events": [],
                "events_complete": True,
            },
            status=status.HTTP_201_CREATED,
        )


def hidden_ranges(request, session_pk: int) -> list[tuple[int, int]]:
    """The seq ranges the session's visible checkpoints hide, when the request leaves hidden
    events out (``include_hidden=false``); none by default: both reads of a session's events
    return every stored event, as an ADK session keeps them."""
    if _bool_param(request, "include_hidden", default=True):
        return []
    return [(c.view.first_seq, c.view.last_seq) for c in history.visible_checkpoints(session_pk)]


INCLUDE_HIDDEN = OpenApiParameter(
    "include_hidden",
    bool,
    description="default true: every stored event; false: leave out what a checkpoint hides",
)


class SessionDetailView(SessionsScopedView):
    """One session with its state and events; ``DELETE`` removes it with its events."""

    allowed_query_params = frozenset({"num_recent_events", "after_timestamp", "include_hidden"})

    @extend_schema(
        operation_id="sessions_get",
        parameters=[
            OpenApiParameter("num_recent_events", int, description="0: no events; N: the newest N"),
            OpenApiParameter(
                "after_timestamp", str, description="only events at or after this time"
            ),
            INCLUDE_HIDDEN,
        ],
        responses={200: ref("Session")},
    )
    def get(self, request, app, user, sid):
        num_recent_events = _int_param(request, "num_recent_events")
        after_timestamp = _timestamp_param(request, "after_timestamp")
        session = selectors.session_with_state(self.tenant, user, sid)
        if session is None:
            raise session_not_found(user, sid)
        session_pk = session.pop("pk")
        events, complete = selectors.session_events_json(
            session_pk,
            num_recent_events=num_recent_events,
            after_timestamp=after_timestamp,
            hidden=hidden_ranges(request, session_pk),
            cap=settings.CTXADMIN_SESSION_EVENTS_MAX,
        )
        session["events_complete"] = complete
        # The events arrive as JSON text from PostgreSQL and are spliced in as they are.
        head = json.dumps(session, ensure_ascii=False, separators=(",", ":"))
        body = f'{head[:-1]},"events":[{",".join(events)}]}}'
        return HttpResponse(body.encode("utf-8"), content_type="application/json")

    @extend_schema(operation_id="sessions_delete", responses={204: None})
    def delete(self, request, app, user, sid):
        services.delete_session(self.tenant, user, sid)
        return Response(status=status.HTTP_204_NO_CONTENT)


EVENT_FILTER_PARAMS = frozenset(
    {
        "authors",
        "exclude_authors",
        "invocation_ids",
        "exclude_invocation_ids",
        "content_types",
        "exclude_content_types",
        "after_timestamp",
        "before_timestamp",
        "final_only",
        "include_hidden",
    }
)


class EventListView(SessionsScopedView):
    """Events in seq order by cursor, with the context builder's filters; or append."""

    allowed_query_params = PAGINATION_QUERY_PARAMS | EVENT_FILTER_PARAMS
    pagination_class = EventCursor

    @extend_schema(
        operation_id="events_list",
        parameters=[
            OpenApiParameter(name, str, description="comma-separated")
            for name in ("authors", "exclude_authors", "invocation_ids", "exclude_invocation_ids")
        ]
        + [
            OpenApiParameter(
                name, str, description=f"comma-separated of {', '.join(CONTENT_TYPES)}"
            )
            for name in ("content_types", "exclude_content_types")
        ]
        + [
            OpenApiParameter("after_timestamp", str, description="inclusive"),
            OpenApiParameter("before_timestamp", str, description="inclusive"),
            OpenApiParameter("final_only", bool),
            INCLUDE_HIDDEN,
        ],
        responses={200: ref("EventPage")},
    )
    def get(self, request, app, user, sid):
        session = self.session_or_404(sid)
        queryset = selectors.filter_events(
            Event.objects.filter(session=session),
            authors=_list_param(request, "authors"),
            exclude_authors=_list_param(request, "exclude_authors"),
            invocation_ids=_list_param(request, "invocation_ids"),
            exclude_invocation_ids=_list_param(request, "exclude_invocation_ids"),
            content_types=_list_param(request, "content_types", choices=CONTENT_TYPES),
            exclude_content_types=_list_param(
                request, "exclude_content_types", choices=CONTENT_TYPES
            ),
            after_timestamp=_timestamp_param(request, "after_timestamp"),
            before_timestamp=_timestamp_param(request, "before_timestamp"),
            final_only=_bool_param(request, "final_only"),
        )
        for first, last in hidden_ranges(request, session.pk):
            queryset = queryset.exclude(seq__range=(first, last))
        page = self.paginate_queryset(selectors.events_as_json(queryset))
        links = json.dumps(
            {"next": self.paginator.get_next_link(), "previous": self.paginator.get_previous_link()}
        )
        body = f'{{"results":[{",".join(row["doc"] for row in page)}],{links[1:]}'
        return HttpResponse(body.encode("utf-8"), content_type="application/json")

    @extend_schema(
        operation_id="events_append",
        request={JSON: ref("AppendRequest")},
        responses={201: ref("AppendResponse"), 200: ref("AppendResponse")},
    )
    def post(self, request, app, user, sid):
        body = request.data
        strict_object(body, {"event", "events", "expected_revision", "state_remove"})
        if ("event" in body) == ("events" in body):
            raise invalid("events", "send exactly one of 'event' or 'events'")
        if "event" in body:
            raw_events, path = [body["event"]], "event"
        else:
            raw_events, path = body["events"], "events"
            limit = settings.CTXADMIN_MAX_BATCH_EVENTS
            if not isinstance(raw_events, list) or not 1 <= len(raw_events) <= limit:
                raise invalid("events", f"must be a list of 1 to {limit} events")
        expected = body.get("expected_revision")
        if expected is not None and (
            isinstance(expected, bool) or not isinstance(expected, int) or expected < 0
        ):
            raise invalid("expected_revision", "must be an integer >= 0")
        state_remove = None
        if body.get("state_remove") is not None:
            try:
                state_remove = validate_state_remove(
                    body["state_remove"], "state_remove", services.event_limits()
                )
            except EventError as exc:
                raise invalid(exc.path, exc.message) from None
        result = services.append_events(
            self.tenant,
            user,
            sid,
            raw_events,
            expected_revision=expected,
            path=path,
            state_remove=state_remove,
        )
        return Response(
            {
                "events": result.events,
                "created": result.created,
                "revision": result.revision,
                "updated_at": iso_timestamp(result.updated_at),
                "state": result.state,
            },
            status=status.HTTP_201_CREATED if result.created else status.HTTP_200_OK,
        )


class UserStateView(SessionsScopedView):
    """The user's ``user:`` state and the app's ``app:`` state, readable before any session."""

    tool_capabilities = {"GET": "state_read"}

    @extend_schema(operation_id="user_state", responses={200: ref("UserState")})
    def get(self, request, app, user):
        app_state, user_state = selectors.scope_states(self.tenant, user)
        return Response(
            {
                "app": self.tenant.name,
                "user_id": user,
                "state": {
                    **scopes.prefixed(scopes.APP_PREFIX, app_state),
                    **scopes.prefixed(scopes.USER_PREFIX, user_state),
                },
            }
        )
