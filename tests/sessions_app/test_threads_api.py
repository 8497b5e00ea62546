"""Graph threads over the API: a checkpoint put with its blobs, reads with channel values and
pending writes, lists (namespace, before, metadata filter, pages), writes kept or replaced
by index, blobs stored once per channel version, pruning per namespace, deleting a thread;
validation in the one envelope with nothing half-applied; tenancy; the console's pages."""

from __future__ import annotations

import base64
import json

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

from sessions_app.threads.models import GraphThread, ThreadBlob, ThreadCheckpoint, ThreadWrite
from tests.service.test_other_app_like_missing import alike, shape
from tests.sessions_app.test_sessions_schema import check

pytestmark = pytest.mark.django_db


def url(thread: str = "t1", *rest: str, app: str = "acme") -> str:
    return "/".join([f"/api/v1/apps/{app}/threads/{thread}", *rest])


def typed(data: bytes, kind: str = "msgpack") -> dict:
    return {"type": kind, "data_base64": base64.b64encode(data).decode()}


def put_body(cid: str, parent: str | None = None, ns: str = "", **channels: tuple[str, bytes]):
    body = {
        "checkpoint_ns": ns,
        "checkpoint_id": cid,
        "parent_checkpoint_id": parent,
        "checkpoint": typed(f"checkpoint {cid}".encode()),
        "metadata": {"step": int(cid[-1]), "source": "loop"},
        "channel_versions": {name: version for name, (version, _data) in channels.items()},
        "blobs": [
            {"channel": name, "version": version, **typed(data)}
            for name, (version, data) in channels.items()
        ],
    }
    check("GraphCheckpointPut", body)
    return body


def error(response, status: int, code: str) -> dict:
    assert response.status_code == status, response.content
    body = response.json()
    assert set(body) == {"error"} and body["error"]["code"] == code, body
    return body["error"]


def test_put_get_list_writes_and_delete(owner):
    api = owner.client()
    first = api.post(url("t1", "checkpoints"), put_body("c1", messages=("1", b"hi")), format="json")
    assert first.status_code == 201, first.content
    check("GraphCheckpointStored", first.json())
    assert first.json()["blobs_stored"] == 1
    # The second checkpoint names the same version of messages and a new one of count: the
    # client sends only the new blob, and the read joins both.
    body = put_body("c2", "c1", count=("1", b"\x01"))
    body["channel_versions"]["messages"] = "1"
    assert api.post(url("t1", "checkpoints"), body, format="json").status_code == 201
    writes = {
        "task_id": "task-a",
        "task_path": "~__pregel_pull, node",
        "writes": [
            {"idx": 0, "channel": "messages", **typed(b"w0")},
            {"idx": -1, "channel": "__error__", **typed(b"boom")},
        ],
    }
    check("GraphWritesPut", writes)
    stored = api.post(url("t1", "checkpoints", "c2", "writes"), writes, format="json")
    assert stored.status_code == 201 and stored.json() == {"writes": 2}
    # A repeat keeps the regular write and replaces the special channel's.
    writes["writes"] = [
        {"idx": 0, "channel": "messages", **typed(b"other")},
        {"idx": -1, "channel": "__error__", **typed(b"again")},
    ]
    api.post(url("t1", "checkpoints", "c2", "writes"), writes, format="json")

    got = api.get(url("t1", "checkpoints", "c2"))
    assert got.status_code == 200, got.content
    check("GraphCheckpoint", got.json())
    found = got.json()
    assert found["parent_checkpoint_id"] == "c1"
    assert base64.b64decode(found["checkpoint"]["data_base64"]) == b"checkpoint c2"
    assert {b["channel"]: base64.b64decode(b["data_base64"]) for b in found["blobs"]} == {
        "count": b"\x01",
        "messages": b"hi",
    }
    assert [(w["channel"], base64.b64decode(w["data_base64"])) for w in found["writes"]] == [
        ("__error__", b"again"),
        ("messages", b"w0"),
    ]
    assert ThreadBlob.objects.count() == 2

    listed = api.get(url("t1", "checkpoints"), {"checkpoint_ns": ""})
    check("GraphCheckpointPage", listed.json())
    assert [c["checkpoint_id"] for c in listed.json()["results"]] == ["c2", "c1"]
    before = api.get(url("t1", "checkpoints"), {"before": "c2"}).json()["results"]
    assert [c["checkpoint_id"] for c in before] == ["c1"]
    filtered = api.get(url("t1", "checkpoints"), {"filter": json.dumps({"step": 1})})
    assert [c["checkpoint_id"] for c in filtered.json()["results"]] == ["c1"]
    absent = api.get(url("t1", "checkpoints"), {"filter": json.dumps({"nothing": None})})
    assert len(absent.json()["results"]) == 2
    page = api.get(url("t1", "checkpoints"), {"limit": 1}).json()
    assert [c["checkpoint_id"] for c in page["results"]] == ["c2"]
    following = api.get(page["next"]).json()
    assert [c["checkpoint_id"] for c in following["results"]] == ["c1"]

    api.post(url("t2", "checkpoints"), put_body("c3", ns="sub:1"), format="json")
    everywhere = api.get("/api/v1/apps/acme/checkpoints").json()["results"]
    assert [(c["thread_id"], c["checkpoint_id"]) for c in everywhere] == [
        ("t2", "c3"),
        ("t1", "c2"),
        ("t1", "c1"),
    ]

    assert api.delete(url("t1")).status_code == 204
    assert error(api.get(url("t1", "checkpoints", "c2")), 404, "not_found")
    assert ThreadCheckpoint.objects.filter(thread__thread_id="t1").count() == 0
    assert ThreadWrite.objects.count() == 0 and ThreadBlob.objects.count() == 0
    assert api.delete(url("t1")).status_code == 204  # deleting nothing is not an error


@override_settings(CTXADMIN_THREAD_CHECKPOINTS_KEEP=2)
def test_a_put_prunes_older_checkpoints_their_writes_and_unreachable_blobs(owner):
    api = owner.client()
    for n in range(1, 5):
        body = put_body(f"c{n}", f"c{n - 1}" if n > 1 else None, a=(str(n), b"v%d" % n))
        body["channel_versions"]["keep"] = "1"
        if n == 1:
            body["blobs"].append({"channel": "keep", "version": "1", **typed(b"kept")})
        api.post(url("t1", "checkpoints"), body, format="json")
        api.post(
            url("t1", "checkpoints", f"c{n}", "writes"),
            {"task_id": "x", "writes": [{"idx": 0, "channel": "a", **typed(b"w")}]},
            format="json",
        )
    # Another namespace keeps its own two.
    api.post(url("t1", "checkpoints"), put_body("c1", ns="sub"), format="json")
    rows = ThreadCheckpoint.objects.filter(checkpoint_ns="").order_by("checkpoint_id")
    assert [row.checkpoint_id for row in rows] == ["c3", "c4"]
    assert sorted(
        ThreadBlob.objects.filter(checkpoint_ns="").values_list("channel", "version")
    ) == [("a", "3"), ("a", "4"), ("keep", "1")]
    assert sorted(ThreadWrite.objects.values_list("checkpoint_id", flat=True)) == ["c3", "c4"]
    assert ThreadCheckpoint.objects.filter(checkpoint_ns="sub").count() == 1
    got = api.get(url("t1", "checkpoints", "c4")).json()
    assert {b["channel"] for b in got["blobs"]} == {"a", "keep"}


def write(api, cid: str, data: bytes, ns: str = "", task: str = "x"):
    body = {
        "checkpoint_ns": ns,
        "task_id": task,
        "writes": [{"idx": 0, "channel": "a", **typed(data)}],
    }
    answer = api.post(url("t1", "checkpoints", cid, "writes"), body, format="json")
    assert answer.status_code == 201, answer.content


def named_blobs(ns: str) -> set[tuple[str, str]]:
    return {
        (channel, version)
        for versions in ThreadCheckpoint.objects.filter(checkpoint_ns=ns).values_list(
            "channel_versions", flat=True
        )
        for channel, version in versions.items()
    }


@override_settings(CTXADMIN_THREAD_CHECKPOINTS_KEEP=3)
def test_after_many_puts_only_what_a_kept_checkpoint_reads_remains(owner):
    """Orphans of every kind: a write that came after its checkpoint was pruned, a write
    against an id never put, a replaced checkpoint's blob, a blob for a version no
    checkpoint names. Only the blobs and writes of kept checkpoints remain (and a write
    ahead of the newest checkpoint, which may still come), and each kept checkpoint reads
    back whole. An orphan goes with the namespace's next put."""
    api = owner.client()
    for n in range(1, 13):
        cid, parent = f"c{n:02}", f"c{n - 1:02}" if n > 1 else None
        body = put_body(cid, parent, a=(str(n), b"a%d" % n), b=(str(n // 4), b"b%d" % (n // 4)))
        body["blobs"].append({"channel": "stray", "version": str(n), **typed(b"unnamed")})
        if n > 1:
            write(api, f"{parent}x", b"never put")  # an id between checkpoints, never stored
            write(api, "c01", b"late")  # its checkpoint pruned (from the fourth put on)
        assert api.post(url("t1", "checkpoints"), body, format="json").status_code == 201
        write(api, cid, b"w%d" % n)
    write(api, "c99", b"ahead")  # ahead of the newest: its checkpoint may be on its way
    # A namespace that never fills: a checkpoint replaced with other versions.
    api.post(url("t1", "checkpoints"), put_body("c01", ns="sub", a=("1", b"old")), format="json")
    api.post(url("t1", "checkpoints"), put_body("c01", ns="sub", a=("2", b"new")), format="json")

    kept = ["c10", "c11", "c12"]
    rows = ThreadCheckpoint.objects.filter(checkpoint_ns="").order_by("checkpoint_id")
    assert [row.checkpoint_id for row in rows] == kept
    for ns in ("", "sub"):
        stored = set(ThreadBlob.objects.filter(checkpoint_ns=ns).values_list("channel", "version"))
        assert stored == named_blobs(ns), ns
    assert named_blobs("sub") == {("a", "2")}
    assert sorted(
        ThreadWrite.objects.filter(checkpoint_ns="").values_list("checkpoint_id", "data")
    ) == [("c10", b"w10"), ("c11", b"w11"), ("c12", b"w12"), ("c99", b"ahead")]
    for n, cid in enumerate(kept, start=10):
        got = api.get(url("t1", "checkpoints", cid)).json()
        blobs = {b["channel"]: base64.b64decode(b["data_base64"]) for b in got["blobs"]}
        assert blobs == {"a": b"a%d" % n, "b": b"b%d" % (n // 4)}, cid
        assert [base64.b64decode(w["data_base64"]) for w in got["writes"]] == [b"w%d" % n]
    got = api.get(url("t1", "checkpoints", "c01"), {"checkpoint_ns": "sub"}).json()
    assert [base64.b64decode(b["data_base64"]) for b in got["blobs"]] == [b"new"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"checkpoint_id": "c1", "checkpoint": typed(b""), "channel_versions": {}, "x": 1}, "x"),
        ({"checkpoint": typed(b""), "channel_versions": {}}, "checkpoint_id"),
        (
            {"checkpoint_id": "../x", "checkpoint": typed(b""), "channel_versions": {}},
            "checkpoint_id",
        ),
        (
            {
                "checkpoint_id": "c1",
                "checkpoint": {"type": "t", "data_base64": "!!"},
                "channel_versions": {},
            },
            "checkpoint.data_base64",
        ),
        (
            {"checkpoint_id": "c1", "checkpoint": typed(b""), "channel_versions": {"a": 1}},
            "channel_versions.a",
        ),
        (
            {
                "checkpoint_id": "c1",
                "checkpoint": typed(b""),
                "channel_versions": {},
                "blobs": [{"channel": "a", "version": "1", **typed(b"")}] * 2,
            },
            "blobs[1]",
        ),
        (
            {
                "checkpoint_id": "c1",
                "checkpoint": typed(b""),
                "channel_versions": {},
                "metadata": {"big": "x" * 70_000},
            },
            "metadata",
        ),
    ],
)
def test_a_bad_put_is_refused_and_writes_nothing(owner, body, field):
    found = error(
        owner.client().post(url("t1", "checkpoints"), body, format="json"), 400, "validation_error"
    )
    assert found["details"]["field"] == field
    assert GraphThread.objects.count() == 0


def test_bad_writes_filters_and_paths_are_refused(owner):
    api = owner.client()
    bad = {"task_id": "t", "writes": [{"idx": 0, "channel": "a", **typed(b"")}] * 2}
    assert (
        error(
            api.post(url("t1", "checkpoints", "c1", "writes"), bad, format="json"),
            400,
            "validation_error",
        )["details"]["field"]
        == "writes[1].idx"
    )
    assert ThreadWrite.objects.count() == 0
    error(api.get(url("t1", "checkpoints"), {"filter": "[1]"}), 400, "invalid_parameter")
    # A lone surrogate, as a key or a value, is no text a row can hold (it was a 500).
    for text in ('{"\\ud800": 1}', '{"step": "\\udc00"}', '{"a": {"a": "a", "a": 1}}'):
        refused = error(
            api.get(url("t1", "checkpoints"), {"filter": text}), 400, "invalid_parameter"
        )
        assert refused["details"] == {"parameter": "filter"}
    error(api.get(url("t1", "checkpoints"), {"shape": "x"}), 400, "unknown_parameter")
    error(api.get(url("bad%20id", "checkpoints")), 400, "invalid_path_parameter")


def test_another_apps_threads_are_not_there(owner, outsider):
    owner.client().post(url("t1", "checkpoints"), put_body("c1"), format="json")
    theirs = outsider.client()
    error(theirs.get(url("t1", "checkpoints", "c1", app="globex")), 404, "not_found")
    assert theirs.get(url("t1", "checkpoints", app="globex")).json()["results"] == []
    assert theirs.get("/api/v1/apps/globex/checkpoints").json()["results"] == []
    theirs.delete(url("t1", app="globex"))
    error(theirs.get(url("t1", "checkpoints", "c1")), 404, "not_found")
    assert ThreadCheckpoint.objects.count() == 1


def test_the_console_lists_threads_without_content(owner, client):
    owner.client().post(
        url("t1", "checkpoints"), put_body("c1", a=("1", b"secret-ish")), format="json"
    )
    operator = get_user_model().objects.create_superuser("root", "r@example.com", "pw")
    client.force_login(operator)
    for page in ("threads/graphthread", "threads/threadcheckpoint"):
        response = client.get(f"/admin/{page}/")
        assert response.status_code == 200
        assert b"checkpoint c1" not in response.content and b"secret-ish" not in response.content
    row = ThreadCheckpoint.objects.get()
    detail = client.get(f"/admin/threads/threadcheckpoint/{row.pk}/change/")
    assert detail.status_code == 200 and b"loop" not in detail.content


def test_another_apps_thread_answers_as_a_missing_one(owner, outsider):
    theirs = outsider.client()
    theirs.post(
        url("t1", "checkpoints", app="globex"), put_body("c1", a=("1", b"x")), format="json"
    )
    owner.client().post(url("mine", "checkpoints"), put_body("c1"), format="json")
    api = owner.client()
    # Same status, body and statements (literals aside) for their thread and a missing one.
    alike(api, "get", url("t1", "checkpoints", "c1"), url("zz", "checkpoints", "c1"))
    alike(api, "get", url("t1", "checkpoints"), url("zz", "checkpoints"), status=200)
    deleted = []
    for thread in ("t1", "zz", "t1", "zz"):
        with CaptureQueriesContext(connection) as queries:
            answer = api.delete(url(thread))
        deleted.append(
            (
                answer.status_code,
                answer.content,
                [shape(q["sql"]) for q in queries.captured_queries],
            )
        )
    assert deleted[2] == deleted[3] and deleted[2][0] == 204
    assert ThreadCheckpoint.objects.filter(thread__app=outsider.app).count() == 1


def test_the_same_thread_id_in_two_apps_is_two_threads(owner, outsider):
    for tenant, data in ((owner, b"ours"), (outsider, b"theirs")):
        app = tenant.app.name
        answer = tenant.client().post(
            url("shared", "checkpoints", app=app), put_body("c1", a=("1", data)), format="json"
        )
        assert answer.status_code == 201, answer.content
    for tenant, data in ((owner, b"ours"), (outsider, b"theirs")):
        got = tenant.client().get(url("shared", "checkpoints", "c1", app=tenant.app.name))
        assert [base64.b64decode(b["data_base64"]) for b in got.json()["blobs"]] == [data]
