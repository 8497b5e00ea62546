"""The point-in-time suite (``bench/facts_suite.py``) through the API: every scripted
history answers as its scenario says, at every valid and record time it reads."""

from __future__ import annotations

import json

import pytest

from bench.facts_suite import SCENARIOS, Scenario, run_scenario, run_suite


def caller(client):
    def call(method: str, path: str, body, params):
        if method == "GET":
            response = client.get(path, params or {})
        elif method == "POST":
            response = client.post(path, body, format="json")
        else:
            response = client.delete(path)
        return response.status_code, (json.loads(response.content) if response.content else {})

    return call


def test_the_suite_holds_at_least_thirty_scenarios_each_with_an_expectation():
    assert len(SCENARIOS) >= 30
    assert len({scenario.name for scenario in SCENARIOS}) == len(SCENARIOS)
    for scenario in SCENARIOS:
        assert any(type(step).__name__ in {"Listed", "Found", "History"} for step in scenario.steps)


@pytest.mark.django_db(transaction=True)
def test_every_scenario_answers_as_scripted(owner):
    results = run_suite(caller(owner.client()), owner.app.name, "suite")
    assert results["failures"] == {}
    assert results["score"] == 1.0
    assert results["scenarios_passed"] == results["scenarios"] == len(SCENARIOS)


@pytest.mark.django_db(transaction=True)
def test_a_wrong_expectation_is_reported(owner):
    """The runner can fail: a scenario expecting the superseded value now does."""
    from bench.facts_suite import Add, Listed

    wrong = Scenario(
        "wrong",
        [
            Add("a", "aisle seat", valid_from="2026-01-01T00:00:00Z"),
            Add("w", "window seat", valid_from="2026-06-01T00:00:00Z"),
            Listed(("aisle seat",)),
        ],
    )
    outcome = run_scenario(caller(owner.client()), owner.app.name, "wrong", wrong)
    assert outcome.checks == 3 and outcome.met == 2
    assert "window seat" in outcome.failures[0]
