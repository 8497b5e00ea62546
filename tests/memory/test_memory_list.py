"""GET .../users/{user}/memories: a user's memories, newest first, by cursor, narrowed by the
search's filters; another user's or app's memories never appear."""

from __future__ import annotations

import json
from datetime import timedelta
from urllib.parse import quote

import pytest
from django.utils import timezone

from memory.models import MemoryEntry
from tests.memory.test_memory_api import add, url

pytestmark = pytest.mark.django_db


def test_lists_newest_first_across_pages(owner, outsider):
    api = owner.client()
    made = [add(api, content=f"fact {n}", metadata={"n": n})["id"] for n in range(5)]
    # One test transaction gives every row one now(): spread them as separate adds would be.
    start = timezone.now() - timedelta(minutes=10)
    for n, entry_id in enumerate(made):
        MemoryEntry.objects.filter(pk=entry_id).update(created_at=start + timedelta(seconds=n))
    add(api, user="bob", content="bob's fact")
    add(outsider.client(), app="globex", content="another app's fact")
    seen, link = [], f"{url()}?limit=2"
    while link:
        page = api.get(link)
        assert page.status_code == 200, page.content
        body = page.json()
        assert len(body["results"]) <= 2
        seen += [entry["id"] for entry in body["results"]]
        link = body["next"]
    assert seen == list(reversed(made))
    first = api.get(url()).json()["results"][0]
    assert first["content"] == "fact 4" and first["metadata"] == {"n": 4}


def test_filters_as_search_does_and_leaves_expired_entries_out(owner):
    api = owner.client()
    first = add(api, content="to Lisbon", metadata={"topic": "travel"})
    MemoryEntry.objects.filter(pk=first["id"]).update(
        created_at=timezone.now() - timedelta(minutes=1)
    )
    kept = add(api, content="to Porto", metadata={"topic": "travel"})
    add(api, content="tea", metadata={"topic": "food"})
    gone = add(api, content="old trip", metadata={"topic": "travel"})
    MemoryEntry.objects.filter(pk=gone["id"]).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    wanted = quote(json.dumps({"topic": "travel"}))
    listed = api.get(f"{url()}?filter={wanted}")
    assert listed.status_code == 200, listed.content
    assert [e["content"] for e in listed.json()["results"]] == ["to Porto", "to Lisbon"]
    assert kept["id"] in {e["id"] for e in listed.json()["results"]}


@pytest.mark.parametrize(
    ("query", "code", "field"),
    [
        ("filter=not-json", "validation_error", "filter"),
        # A lone surrogate, as a key or a value (the key was a 500); nesting past the language.
        ("filter=" + quote('{"\\ud800": 1}'), "validation_error", "filter"),
        ("filter=" + quote('{"k": "\\udfff"}'), "validation_error", "filter"),
        ("filter=" + quote("[" * 5000), "validation_error", "filter"),
        (f"filter={quote(json.dumps({'k': {'$regex': 'a'}}))}", "validation_error", None),
        ("session_id=s1", "unknown_parameter", None),
        ("colour=red", "unknown_parameter", None),
        ("limit=0", "invalid_parameter", None),
    ],
)
def test_bad_parameters_are_refused(owner, query, code, field):
    answer = owner.client().get(f"{url()}?{query}")
    assert answer.status_code == 400, answer.content
    error = answer.json()["error"]
    assert error["code"] == code
    if field:
        assert error["details"]["field"] == field


def test_erasing_takes_no_list_parameter(owner):
    answer = owner.client().delete(f"{url()}?session_id=s1&limit=2")
    assert answer.status_code == 400
    assert answer.json()["error"]["code"] == "unknown_parameter"
