"""Every id a client chooses lives in its own app's key space: the same id used by two apps
names two objects, the second use is neither refused nor told of the first, and each app
sees only its own. One test per kind of id: compaction ids, invocation ids, memory
idempotency keys, ingestion job ids, session ids, event ids and artifact names."""

from __future__ import annotations

import base64

import pytest

from sessions_app.models import Checkpoint
from tests.conftest import make_tenant
from tests.outbox_helpers import admit, memories_url, session_with_events
from tests.sessions_helpers import sessions_url, text

pytestmark = pytest.mark.django_db

SHARED_ID = "00000000-0000-4000-8000-0000000000aa"
SECOND_ID = "00000000-0000-4000-8000-0000000000bb"


@pytest.fixture(autouse=True)
def quiet(monkeypatch):
    from memory.tasks import drain_outbox
    from sessions_app.tasks import run_compaction

    for task in (drain_outbox, run_compaction):
        monkeypatch.setattr(task, "delay_on_commit", lambda *a, **k: None)


def _tenant_with_history(name: str, turns: int = 4):
    tenant = make_tenant(name)
    api = tenant.client()
    base = sessions_url(name)
    assert api.post(base, {"session_id": "s"}, format="json").status_code == 201
    for turn in range(1, turns + 1):
        events = [
            text("user", " ".join(f"ask{turn}-{i}" for i in range(40)), event_id=f"u{turn}"),
            text("agent", " ".join(f"reply{turn}-{i}" for i in range(40)), event_id=f"m{turn}"),
        ]
        assert api.post(f"{base}/s/events", {"events": events}, format="json").status_code == 201
    policy = {"token_threshold": 10, "retain_recent_exchanges": 1}
    assert api.put(f"{base}/s/compaction-policy", policy, format="json").status_code == 200
    return tenant, api, f"{base}/s"


def _more_turns(api, session: str, first: int) -> None:
    for turn in range(first, first + 3):
        events = [
            text("user", " ".join(f"ask{turn}-{i}" for i in range(40)), event_id=f"u{turn}"),
            text("agent", " ".join(f"reply{turn}-{i}" for i in range(40)), event_id=f"m{turn}"),
        ]
        assert api.post(f"{session}/events", {"events": events}, format="json").status_code == 201


def test_compaction_ids(db):
    _, acme, acme_session = _tenant_with_history("acme")
    first = acme.post(f"{acme_session}/compactions", {"compaction_id": SHARED_ID}, format="json")
    assert first.status_code == 201, first.content
    _, globex, globex_session = _tenant_with_history("globex")
    # The same id in another app: a new compaction there, not 409 compaction_id_taken.
    taken = globex.post(
        f"{globex_session}/compactions", {"compaction_id": SHARED_ID}, format="json"
    )
    assert taken.status_code == 201, taken.content
    assert taken.json()["compaction_id"] == SHARED_ID
    rows = Checkpoint.objects.filter(compaction_id=SHARED_ID)
    assert rows.count() == 2 and len({row.pk for row in rows}) == 2
    # Each app reads its own under the shared id; a retry in each app is idempotent there.
    for api, session, app in ((acme, acme_session, "acme"), (globex, globex_session, "globex")):
        shown = api.get(f"{session}/compactions/{SHARED_ID}")
        assert shown.status_code == 200 and shown.json()["compaction_id"] == SHARED_ID
        again = api.post(f"{session}/compactions", {"compaction_id": SHARED_ID}, format="json")
        assert again.status_code == 200
        row = Checkpoint.objects.get(app__name=app, compaction_id=SHARED_ID)
        assert again.json()["coverage"] == {"first_seq": row.first_seq, "last_seq": row.last_seq}
    # The second app's compaction shows only public ids: its summary event, the next
    # compaction's parent, the subsumption, the expected head and the context's accounting.
    events = globex.get(f"{globex_session}/events", {"include_hidden": "true"}).json()["results"]
    summary = [e for e in events if e["author"] == "ctxadmin"]
    assert [e["event_id"] for e in summary] == [f"compaction-{SHARED_ID}"]
    assert summary[0]["custom_metadata"] == {"checkpoint_id": SHARED_ID}
    _more_turns(globex, globex_session, 5)
    stale = globex.post(
        f"{globex_session}/compactions",
        {"compaction_id": SECOND_ID, "expected_head": SECOND_ID},
        format="json",
    )
    assert stale.status_code == 409
    assert stale.json()["error"]["details"] == {
        "expected_head": SECOND_ID,
        "current_head": SHARED_ID,
    }
    second = globex.post(
        f"{globex_session}/compactions",
        {"compaction_id": SECOND_ID, "expected_head": SHARED_ID},
        format="json",
    )
    assert second.status_code == 201, second.content
    assert second.json()["parent_id"] == SHARED_ID
    listed = globex.get(f"{globex_session}/compactions").json()["results"]
    by_id = {row["compaction_id"]: row for row in listed}
    assert set(by_id) == {SHARED_ID, SECOND_ID}
    assert by_id[SHARED_ID]["subsumed_by"] == SECOND_ID
    assert by_id[SECOND_ID]["parent_id"] == SHARED_ID
    built = globex.post(
        f"{globex_session}/context",
        {"current_input": {"role": "user", "parts": [{"text": "next"}]}},
        format="json",
    )
    assert built.status_code == 200
    items = built.json()["envelope"]["history"]
    assert [i["checkpoint_id"] for i in items if "checkpoint_id" in i] == [SECOND_ID]
    diagnostics = globex.get("/dev/v1/context/globex/alice/s")
    assert diagnostics.status_code == 200, diagnostics.content
    assert diagnostics.json()["checkpoint"]["checkpoint_id"] == SECOND_ID
    # The first app still sees only its own compaction.
    mine = acme.get(f"{acme_session}/compactions").json()["results"]
    assert [row["compaction_id"] for row in mine] == [SHARED_ID]
    assert acme.get(f"{acme_session}/compactions/{SECOND_ID}").status_code == 404


def test_an_async_compaction_under_another_apps_id_runs_as_its_own(db):
    from sessions_app.tasks import run_compaction

    _, acme, acme_session = _tenant_with_history("acme")
    assert (
        acme.post(
            f"{acme_session}/compactions", {"compaction_id": SHARED_ID}, format="json"
        ).status_code
        == 201
    )
    _, globex, globex_session = _tenant_with_history("globex")
    accepted = globex.post(
        f"{globex_session}/compactions",
        {"compaction_id": SHARED_ID, "async": True},
        format="json",
    )
    assert accepted.status_code == 202, accepted.content
    assert accepted.json()["compaction_id"] == SHARED_ID
    assert accepted.json()["status_url"].endswith(f"/s/compactions/{SHARED_ID}")
    row = Checkpoint.objects.get(app__name="globex", compaction_id=SHARED_ID)
    assert run_compaction.run(str(row.pk)) == "active"
    assert globex.get(f"{globex_session}/compactions/{SHARED_ID}").json()["status"] == "active"
    acme_row = Checkpoint.objects.get(app__name="acme", compaction_id=SHARED_ID)
    assert acme_row.status == "active" and acme_row.pk != row.pk


def test_within_an_app_a_compaction_id_names_one_compaction(db):
    _, acme, acme_session = _tenant_with_history("acme")
    assert (
        acme.post(
            f"{acme_session}/compactions", {"compaction_id": SHARED_ID}, format="json"
        ).status_code
        == 201
    )
    other = sessions_url("acme", "bob")
    assert acme.post(other, {"session_id": "t"}, format="json").status_code == 201
    taken = acme.post(f"{other}/t/compactions", {"compaction_id": SHARED_ID}, format="json")
    assert taken.status_code == 409
    assert taken.json()["error"]["code"] == "compaction_id_taken"


AGENT = {"provider": "fake", "model": "fake-1"}


def test_invocation_ids(db):
    answers = []
    for name in ("acme", "globex"):
        api = make_tenant(name).client()
        api.post(sessions_url(name), {"session_id": "s"}, format="json")
        answers.append(
            api.post(
                f"{sessions_url(name)}/s/invocations",
                {
                    "invocation_id": "inv-shared",
                    "input": {"role": "user", "parts": [{"text": f"hello from {name}"}]},
                    "agent": AGENT,
                    "cache": "off",
                },
                format="json",
            )
        )
    assert [answer.status_code for answer in answers] == [201, 201], answers[1].content
    assert {answer.json()["invocation_id"] for answer in answers} == {"inv-shared"}


def test_memory_idempotency_keys(db):
    made = {}
    for name in ("acme", "globex"):
        api = make_tenant(name).client()
        answer = api.post(
            memories_url(name, "alice"),
            {"content": f"{name} likes tea", "idempotency_key": "note-1"},
            format="json",
        )
        assert answer.status_code == 201, answer.content
        made[name] = (api, answer.json()["id"])
    assert made["acme"][1] != made["globex"][1]
    for name, (api, memory_id) in made.items():
        shown = api.get(f"{memories_url(name, 'alice')}/{memory_id}")
        assert shown.status_code == 200 and shown.json()["content"] == f"{name} likes tea"
        other = "globex" if name == "acme" else "acme"
        assert api.get(f"{memories_url(name, 'alice')}/{made[other][1]}").status_code == 404


def test_ingestion_job_ids(db):
    jobs = {}
    for name in ("acme", "globex"):
        api = make_tenant(name).client()
        session_with_events(api, name, "alice", "s", 4)
        jobs[name] = (api, admit(api, name, "alice", "s").json()["job_id"])
    assert jobs["acme"][1] != jobs["globex"][1]
    api, acme_job = jobs["acme"]
    assert api.get(f"/api/v1/apps/acme/outbox/jobs/{acme_job}").status_code == 200
    assert api.get(f"/api/v1/apps/acme/outbox/jobs/{jobs['globex'][1]}").status_code == 404


def test_session_event_ids_and_artifact_names(db):
    for name in ("acme", "globex"):
        api = make_tenant(name).client()
        base = sessions_url(name)
        assert api.post(base, {"session_id": "shared"}, format="json").status_code == 201
        appended = api.post(
            f"{base}/shared/events",
            {"event": text("user", f"hello from {name}", event_id="ev-shared")},
            format="json",
        )
        assert appended.status_code == 201, appended.content
        saved = api.post(
            f"{base}/shared/artifacts/report.txt",
            {"data_base64": base64.b64encode(name.encode()).decode(), "mime_type": "text/plain"},
            format="json",
        )
        assert saved.status_code == 201, saved.content
        assert saved.json()["version"] == 0
        events = api.get(f"{base}/shared/events").json()["results"]
        assert [e["content"]["parts"][0]["text"] for e in events] == [f"hello from {name}"]
