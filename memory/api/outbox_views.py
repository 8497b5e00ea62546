"""The durable ingestion outbox over REST: admission, a job's status, cancel, statistics.

Every endpoint needs the ``memory`` scope and sees only the key's app; what it returns is
content-free (ids, phases, counts, times, fixed error messages).
"""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.response import Response

from ctxadmin.api.schema import ref
from ctxadmin.errors import invalid
from memory.api.views import JSON, MemoryScopedView
from memory.outbox import admission as outbox_admission
from memory.outbox import operations


def _status_url(request, app: str, job_id: str) -> str:
    return request.build_absolute_uri(f"/api/v1/apps/{app}/outbox/jobs/{job_id}")


class MemoryIngestionsView(MemoryScopedView):
    """``{"session_id", "after_seq"?, "max_attempts"?, "extractor"?}``: the session's events
    after ``after_seq`` (at most 5,000 events and 8 MiB) become one durable ingestion job,
    drained by workers; with an extractor (the request's, else the app's memory policy's),
    an extraction job."""

    @extend_schema(
        operation_id="memories_ingestions_admit",
        description="202 with the job (new) or 200 with `deduplicated: true` (the same events "
        "at the same erasure epoch were admitted already; a failed or cancelled job of them "
        "starts afresh instead, 202). 404 for a session not in this "
        "scope; 422 `nothing_to_ingest`; 403 `consent_required`; 429 "
        "`outbox_capacity_exceeded` (details name the limit) or `terminal_retention_full`.",
        request={JSON: ref("OutboxAdmission")},
        responses={202: ref("OutboxAdmitted"), 200: ref("OutboxAdmitted")},
    )
    def post(self, request, app, user):
        session_id, after_seq, attempts, extractor = outbox_admission.parse_request(request.data)
        admission = outbox_admission.admit(
            self.tenant,
            user,
            session_id,
            after_seq=after_seq,
            max_attempts=attempts,
            extractor=extractor,
        )
        job = admission.job
        body = {
            "job_id": str(job.pk),
            "status_url": _status_url(request, app, str(job.pk)),
            "deduplicated": admission.deduplicated,
            "phase": job.phase,
            "events": job.events,
            "first_seq": job.first_seq,
            "last_seq": job.last_seq,
            "erasure_epoch": job.erasure_epoch,
            "more": admission.more,
            "next_after_seq": admission.next_after_seq,
        }
        code = status.HTTP_200_OK if admission.deduplicated else status.HTTP_202_ACCEPTED
        return Response(body, status=code)


class OutboxJobView(MemoryScopedView):
    user_field = None

    @extend_schema(operation_id="outbox_job_get", responses={200: ref("OutboxJob")})
    def get(self, request, app, job_id):
        return Response(operations.job_json(operations.get_job(self.tenant, job_id)))


class OutboxJobCancelView(MemoryScopedView):
    user_field = None

    @extend_schema(
        operation_id="outbox_job_cancel",
        description="Cancel an active job: a running job stops before its next batch (what "
        "it wrote stays). Cancelling a cancelled job answers it again; a completed or "
        "failed job is 409 `outbox_job_ended`.",
        request=None,
        responses={200: ref("OutboxJob")},
    )
    def post(self, request, app, job_id):
        if request.data:
            raise invalid("body", "cancelling a job takes no body")
        return Response(operations.job_json(operations.cancel(self.tenant, job_id)))


class OutboxStatsView(MemoryScopedView):
    user_field = None

    @extend_schema(operation_id="outbox_stats", responses={200: ref("OutboxStats")})
    def get(self, request, app):
        return Response(operations.stats(self.tenant))
