"""The duplicates target on real data: one LoCoMo conversation ingested three times through
the outbox (three sessions of one user) leaves no exact duplicate and under 2% near
duplicates among the scope's memories, counted as ``bench/duplicates_bench.py`` counts them;
and the near-duplicate threshold merges no two distinct utterances of the conversations."""

from __future__ import annotations

import json

import pytest

from bench import duplicates_bench, locomo
from memory.models import MemoryEntry
from memory.outbox import worker
from tests.sessions_helpers import sessions_url

pytestmark = pytest.mark.skipif(not locomo.DATA.exists(), reason="the LoCoMo subset is absent")


def _sample() -> dict:
    samples = json.loads(locomo.DATA.read_text())
    return next(s for s in samples if s["sample_id"] == duplicates_bench.SAMPLE)


@pytest.mark.django_db
def test_three_ingestions_of_a_conversation_leave_no_duplicates(owner):
    api = owner.client()
    turns = [e for _i, events in locomo.invocations(_sample(), named=True) for e in events]
    base = "/api/v1/apps/acme/users/alice"
    for n in (1, 2, 3):
        sid = f"pass-{n}"
        assert api.post(sessions_url("acme"), {"session_id": sid}, format="json").status_code == 201
        for start in range(0, len(turns), 100):
            batch = {"events": turns[start : start + 100]}
            result = api.post(f"{sessions_url('acme')}/{sid}/events", batch, format="json")
            assert result.status_code == 201, result.content
        after = 0
        while True:
            admitted = api.post(
                f"{base}/memories/ingestions",
                {"session_id": sid, "after_seq": after},
                format="json",
            ).json()
            if not admitted.get("more"):
                break
            after = admitted["next_after_seq"]
        while worker.drain().get("completed"):
            pass
    contents = list(MemoryEntry.objects.filter(user_id="alice").values_list("content", flat=True))
    found = duplicates_bench.counts(contents)
    fillers = sum(duplicates_bench.carries_no_fact(t["content"]["parts"][0]["text"]) for t in turns)
    assert found["exact"] == 0 and found["near_share"] < duplicates_bench.NEAR_TARGET, found
    # Every turn that carries a fact is a memory once: nothing was lost to the merges.
    assert len(turns) - fillers - found["memories"] <= len(turns) * 0.02


def test_the_threshold_merges_no_distinct_utterances():
    calibration = duplicates_bench.calibration([_sample()])
    chosen = calibration["by_threshold"][str(calibration["threshold"])]
    assert chosen["wrong_merges"] == 0 and chosen["caught"] > 0.95
