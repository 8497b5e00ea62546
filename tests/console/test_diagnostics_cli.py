"""The diagnostics management commands: ``inspect_context``, ``context_cache_invalidate``,
``outbox`` and ``erase_user`` print content-free JSON, and refuse what the API refuses."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from caching import registry
from caching.models import CacheEntry, CacheScope
from memory.models import MemoryEntry, OutboxJob
from tests.console.diagnostics_helpers import (
    MODEL,
    SID,
    USER,
    World,
    assert_seeded,
    build_world,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("quiet_tasks")]


@pytest.fixture
def world() -> World:
    return build_world()


def run(*args) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def run_json(*args) -> tuple[dict, str]:
    out, err = run(*args)
    return json.loads(out), out + err


def assert_clean(world: World, *outputs: str) -> None:
    for text in outputs:
        for forbidden in world.forbidden():
            assert forbidden not in text, (forbidden, text[:400])


def confirm_json(world: World, **changes) -> str:
    return json.dumps(
        {
            "app_name": "acme",
            "user_id": USER,
            "session_id": SID,
            "model": MODEL,
            "scope_fingerprint": world.scope_fingerprint,
            **changes,
        }
    )


def generation(world: World) -> int:
    return CacheScope.objects.get(fingerprint=world.scope_fingerprint).generation


# ----------------------------------------------------------------------------- inspect


def test_inspect_context_prints_the_diagnostics_as_json(world):
    assert_seeded(world)
    report, text = run_json("inspect_context", "acme", USER, SID)
    assert (report["app"], report["user_id"], report["session_id"]) == ("acme", USER, SID)
    assert report["events"]["selected"] > 0 and report["compressed"] is True
    assert report["checkpoint"]["checkpoint_id"] == world.checkpoint_id
    assert len(report["context_fingerprint"]) == 64
    capped, capped_text = run_json("inspect_context", "acme", USER, SID, "--max-bytes", "300")
    assert capped["truncated"] is True and capped["policy"]["max_bytes"] == 300
    lifecycle, lifecycle_text = run_json(
        "inspect_context", "acme", USER, SID, "--lifecycle", "--model", MODEL
    )
    assert lifecycle["checkpoint"]["source_fingerprint"]
    assert lifecycle["cache"]["scope_fingerprint"] == world.scope_fingerprint
    assert lifecycle["cache"]["entries"] == 1
    assert_clean(world, text, capped_text, lifecycle_text)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("nosuchapp", USER, SID), "no app named"),
        (("acme", USER, "nope"), "not_found"),
        (("acme", "bad user", SID), "invalid_path_parameter"),
        (("acme", USER, SID, "--max-bytes", "0"), "invalid_parameter"),
        (("acme", USER, SID, "--model", MODEL), "--model goes with --lifecycle"),
        (("acme", USER, SID, "--lifecycle", "--max-bytes", "9"), "no context budget"),
        (("acme", USER, SID, "--lifecycle", "--model", "bad model"), "invalid_parameter"),
    ],
)
def test_inspect_context_refusals(world, args, message):
    with pytest.raises(CommandError, match=message):
        run("inspect_context", *args)


# ----------------------------------------------------------------------------- invalidate


def test_context_cache_invalidate_with_the_exact_confirmation(world):
    result, text = run_json(
        "context_cache_invalidate",
        "acme",
        USER,
        SID,
        "--model",
        MODEL,
        "--confirm-json",
        confirm_json(world),
    )
    assert result["scope_fingerprint"] == world.scope_fingerprint
    assert (result["generation"], result["entries_invalidated"]) == (2, 1)
    assert generation(world) == 2
    with pytest.raises(registry.LeaseError):
        registry.resolve(world.owner.app, world.lease)
    assert_clean(world, text)


@pytest.mark.parametrize(
    ("model", "document", "message"),
    [
        (MODEL, {"scope_fingerprint": "f" * 64}, "confirmation_mismatch"),
        (MODEL, {"user_id": "bob"}, "confirmation_mismatch"),
        (MODEL, {"session_id": "s-2"}, "confirmation_mismatch"),
        (MODEL, {"app_name": "globex"}, "confirmation_mismatch"),
        ("gemini-2.5-pro", {}, "confirmation_mismatch"),
        ("gemini-2.5-pro", {"model": "gemini-2.5-pro"}, "confirmation_mismatch"),
        (MODEL, {"extra": 1}, "validation_error"),
        (MODEL, "not json", "malformed_json"),
    ],
)
def test_context_cache_invalidate_refuses_a_mismatch_and_changes_nothing(
    world, model, document, message
):
    raw = document if isinstance(document, str) else confirm_json(world, **document)
    with pytest.raises(CommandError, match=message):
        run("context_cache_invalidate", "acme", USER, SID, "--model", model, "--confirm-json", raw)
    assert generation(world) == 1
    assert list(CacheEntry.objects.values_list("state", flat=True)) == ["active"]
    assert registry.resolve(world.owner.app, world.lease).resource_name == world.resource_name


def test_a_failing_command_exits_non_zero(world):
    from django.core.management import ManagementUtility

    wrong = confirm_json(world, scope_fingerprint="0" * 64)
    argv = ["manage.py", "context_cache_invalidate", "acme", USER, SID, "--model", MODEL]
    utility = ManagementUtility([*argv, "--confirm-json", wrong])
    with pytest.raises(SystemExit) as exit_info:
        utility.execute()
    assert exit_info.value.code == 1
    assert generation(world) == 1


# ----------------------------------------------------------------------------- outbox


def test_outbox_stats_status_retry_cancel_and_prune(world):
    stats, stats_text = run_json("outbox", "stats")
    by_app = {entry["app"]: entry for entry in stats["apps"]}
    assert by_app["acme"]["by_phase"]["pending"] == 1
    assert by_app["globex"]["active"] == 0
    only, _ = run_json("outbox", "stats", "--app", "acme")
    assert [entry["app"] for entry in only["apps"]] == ["acme"]

    status, status_text = run_json("outbox", "status", world.job_id)
    assert (status["app"], status["job_id"], status["phase"]) == ("acme", world.job_id, "pending")

    OutboxJob.objects.filter(pk=world.job_id).update(due_at="2100-01-01T00:00:00Z")
    retried, _ = run_json("outbox", "retry", world.job_id)
    assert retried["phase"] == "pending"
    assert OutboxJob.objects.get(pk=world.job_id).due_at.year < 2100

    cancelled, cancel_text = run_json("outbox", "cancel", world.job_id)
    assert cancelled["phase"] == "cancelled"
    again, _ = run_json("outbox", "cancel", world.job_id)  # a no-op, as in the API
    assert again["phase"] == "cancelled"
    with pytest.raises(CommandError, match="only a pending or retrying job"):
        run("outbox", "retry", world.job_id)

    kept, _ = run_json("outbox", "prune")  # within the retention period
    assert kept == {"pruned": 0}
    pruned, _ = run_json("outbox", "prune", "--older-than-seconds", "0", "--batch", "1")
    assert pruned == {"pruned": 1}
    assert not OutboxJob.objects.exists()
    assert_clean(world, stats_text, status_text, cancel_text)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("stats", "--app", "nosuchapp"), "no app named"),
        (("status", "00000000-0000-4000-8000-000000000009"), "not_found"),
        (("status", "not-a-uuid"), "not_found"),
        (("cancel", "00000000-0000-4000-8000-000000000009"), "not_found"),
        (("prune", "--batch", "0"), "--batch"),
        (("prune", "--older-than-seconds", "-1"), "--older-than-seconds"),
    ],
)
def test_outbox_refusals(world, args, message):
    with pytest.raises(CommandError, match=message):
        run("outbox", *args)
    assert OutboxJob.objects.get(pk=world.job_id).phase == "pending"


def test_outbox_needs_an_action():
    with pytest.raises(CommandError):
        run("outbox")


def test_cancelling_an_ended_job_is_refused(world):
    OutboxJob.objects.filter(pk=world.job_id).update(phase="completed")
    with pytest.raises(CommandError, match="outbox_job_ended"):
        run("outbox", "cancel", world.job_id)


# ----------------------------------------------------------------------------- erase


def test_erase_user_refuses_without_confirm_then_erases(world):
    with pytest.raises(CommandError, match="without --confirm"):
        run("erase_user", "acme", USER)
    assert MemoryEntry.objects.filter(user_id=USER).count() == 2
    with pytest.raises(CommandError, match="no app named"):
        run("erase_user", "nosuchapp", USER, "--confirm")
    receipt, text = run_json("erase_user", "acme", USER, "--confirm")
    assert receipt["kind"] == "user" and receipt["counts"]["entries"] == 2
    assert receipt["erased_by"] == "cli"
    assert not MemoryEntry.objects.filter(user_id=USER).exists()
    assert OutboxJob.objects.get(pk=world.job_id).phase == "cancelled"
    assert_clean(world, text)
    again, _ = run_json("erase_user", "acme", USER, "--confirm")
    assert again["counts"] == {
        "entries": 0,
        "queued_work": 0,
        "consent_records": 0,
        "tokens_revoked": 0,
        "user_state_keys": 0,
        "user_artifacts": 0,
    }
