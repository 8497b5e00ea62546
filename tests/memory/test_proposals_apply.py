"""A checked batch of proposed operations lands whole or not at all: updates supersede
through the facts' versions, retiring closes validity and deletes nothing, adds go through
the duplicate layers, a candidate gone since it was shown refuses the batch, and an erasure
since the batch was prepared leaves nothing of the user behind."""

from __future__ import annotations

import pytest

from ctxadmin.credentials import looks_like_secret
from ctxadmin.errors import ServiceError
from memory.models import MemoryEntry
from memory.proposals import Candidate, Limits, ProposalError, check
from memory.proposals_apply import apply
from memory.scope import current_epoch
from tests.conftest import make_tenant

BASE = "/api/v1/apps/acme/users/alice/memories"
LIMITS = Limits(32768, looks_like_secret)


def add(api, **body) -> dict:
    result = api.post(BASE, body, format="json")
    assert result.status_code == 201, result.content
    return result.json()


def op(kind: str, **fields) -> dict:
    return {"op": kind, "reason": "said so", "source_event_ids": ["e1"], **fields}


@pytest.fixture
def owner():
    return make_tenant("acme")


@pytest.fixture
def api(owner):
    return owner.client()


@pytest.fixture
def shown(api):
    seat = add(api, content="Prefers aisle seats", key="preference.seat")
    home = add(api, content="Lives in Porto")
    pet = add(api, content="Has a cat named Miso")
    return [
        Candidate(1, seat["id"], seat["content"], "preference.seat"),
        Candidate(2, home["id"], home["content"], None),
        Candidate(3, pet["id"], pet["content"], None),
    ]


def run(owner, shown, operations, **kwargs):
    checked = check({"operations": operations}, shown, {"e1"}, LIMITS)
    return apply(owner.app, "alice", checked, **kwargs)


def live(api) -> list[str]:
    return sorted(entry["content"] for entry in api.get(BASE).json()["results"])


# Each request and the batch in their own transactions: the clock moves between them, as
# versions' valid times need.
@pytest.mark.django_db(transaction=True)
class TestApply:
    def test_update_retire_add_and_noop_in_one_batch(self, api, owner, shown):
        counts = run(
            owner,
            shown,
            [
                op("update", candidate=1, content="Prefers window seats"),
                op("update", candidate=2, content="Lives in Lisbon", key="identity.home"),
                op("retire", candidate=3),
                op("add", content="Is vegetarian", key="preference.diet"),
                {"op": "noop", "reason": "small talk"},
            ],
            session_id="s1",
        )
        assert counts == {"added": 1, "updated": 2, "retired": 1, "unchanged": 1}
        assert live(api) == ["Is vegetarian", "Lives in Lisbon", "Prefers window seats"]
        # Nothing was deleted: the retired and superseded memories stay, closed.
        assert MemoryEntry.objects.count() == 6
        seat = api.get(f"{BASE}/{shown[0].memory_id}").json()
        assert seat["valid_to"] is not None and seat["superseded_by"] is not None
        home = api.get(f"{BASE}/{shown[1].memory_id}").json()
        lisbon = MemoryEntry.objects.get(key="identity.home")
        assert home["superseded_by"] == str(lisbon.id) and lisbon.session_id == "s1"
        assert lisbon.event_id == "e1" and lisbon.metadata == {"source": "extraction"}
        pet = api.get(f"{BASE}/{shown[2].memory_id}").json()
        assert pet["valid_to"] is not None and pet["superseded_by"] is None
        history = api.get(f"{BASE}/{shown[0].memory_id}/history").json()["versions"]
        assert [v["content"] for v in history] == ["Prefers aisle seats", "Prefers window seats"]

    def test_an_add_the_scope_holds_is_unchanged(self, api, owner, shown):
        counts = run(owner, shown, [op("add", content="has a cat named Miso.")])
        assert counts["unchanged"] == 1 and MemoryEntry.objects.count() == 3

    def test_a_candidate_gone_since_it_was_shown_refuses_the_whole_batch(self, api, owner, shown):
        assert api.delete(f"{BASE}/{shown[2].memory_id}").status_code == 204
        with pytest.raises(ProposalError) as refused:
            run(
                owner,
                shown,
                [
                    op("update", candidate=1, content="Prefers window seats"),
                    op("retire", candidate=3),
                ],
            )
        assert (refused.value.code, refused.value.path) == (
            "candidate_gone",
            "operations[1].candidate",
        )
        assert live(api) == ["Lives in Porto", "Prefers aisle seats"]  # the update is undone
        assert MemoryEntry.objects.count() == 2

    def test_an_erasure_since_the_batch_was_prepared_refuses_it(self, api, owner, shown):
        epoch = current_epoch(owner.app, "alice")
        erased = api.delete(BASE, {"confirm": "erase user alice"}, format="json")
        assert erased.status_code == 200, erased.content
        with pytest.raises(ServiceError) as refused:
            run(owner, [], [op("add", content="Lives in Lisbon")], epoch=epoch)
        assert refused.value.code == "memory_erasure_epoch_stale"
        assert MemoryEntry.objects.filter(user_id="alice").count() == 0
